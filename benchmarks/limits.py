"""This machine's limits, and from them the floor of a step for a given model and batch.

    python benchmarks/limits.py [--model smollm2-135m-instruct] [--rows 32] [--prompt 40] [--new 32] [--threads 2]

Measured in the same run as whatever they are compared with (machines of one kind differ several-fold):
- the float32 matmul rate at each shape a step multiplies (a decode step's (rows x hidden) by
  (hidden x out) is far from the square-matrix peak), and the bf16 rate for floors of bf16 work;
- memory bandwidth: the rate of reading a buffer far larger than the caches.
Floors (a Llama-shaped model: q, k, v, o, gate, up, down per layer, then the output layer), each in a
type (float32, or bf16: weights of 2 bytes, bf16 matmul rates):
- decode step (one token for each of `rows` rows): the larger of reading every weight once (plus the
  KV cache) at the bandwidth, and its matmuls at their measured rates;
- prefill (`prompts` prompts of `prompt` tokens): its matmuls at their rates;
- update (forward + backward over `tokens` tokens): three times the forward's matmuls, plus AdamW's
  passes over the float32 weights (read weights, gradients and both moments, write three) at the bandwidth.
Attention's own arithmetic is left out: at these lengths it is a few percent of the matmuls.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Shape:
    """The Llama shapes of a model: what a floor needs."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    parameters: int
    """All of them, the tied embedding once."""

    @classmethod
    def of(cls, model) -> Shape:
        c = model.config
        return cls(
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers,
            c.num_attention_heads,
            getattr(c, "num_key_value_heads", None) or c.num_attention_heads,
            c.vocab_size,
            sum(p.numel() for p in model.parameters()),
        )

    def matmuls(self, rows: int) -> list[tuple[int, int, int, int]]:
        """(M, K, N, count) of one forward over `rows` token positions."""
        h, kv = self.hidden, self.hidden * self.kv_heads // self.heads
        per_layer = [
            (rows, h, h, 2),
            (rows, h, kv, 2),
            (rows, h, self.intermediate, 2),
            (rows, self.intermediate, h, 1),
        ]
        return [(m, k, n, c * self.layers) for m, k, n, c in per_layer] + [(rows, h, self.vocab, 1)]


def matmul_gflops(m: int, k: int, n: int, seconds: float = 0.3, dtype: torch.dtype = torch.float32) -> float:
    """GFLOP/s of an (m x k) @ (k x n) product in `dtype` as a linear layer computes it (the weight stored
    (n x k), the layout CPU bf16 kernels are fast on), on this thread's torch threads (best of a timed loop)."""
    a, w = torch.randn(m, k, dtype=dtype), torch.randn(n, k, dtype=dtype)
    torch.nn.functional.linear(a, w)
    best, runs, t_end = float("inf"), 0, time.perf_counter() + seconds
    while time.perf_counter() < t_end or runs < 5:
        t0 = time.perf_counter()
        torch.nn.functional.linear(a, w)
        best, runs = min(best, time.perf_counter() - t0), runs + 1
    return 2 * m * k * n / best / 1e9


def bandwidth_gbs(mb: int = 512, repeats: int = 5) -> float:
    """GB/s of reading `mb` MB of float32 (a sum: one read of each byte), best of `repeats`."""
    x = torch.ones(mb * 2**20 // 4)
    x.sum()
    best = min(_timed(x.sum) for _ in range(repeats))
    return x.numel() * 4 / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Limits:
    """Measured rates, cached per matmul shape."""

    def __init__(self):
        self.bandwidth_gbs = bandwidth_gbs()
        self.square_gflops = matmul_gflops(1024, 1024, 1024)
        self._rates: dict[tuple[int, int, int, torch.dtype], float] = {}

    def rate(self, m: int, k: int, n: int, dtype: torch.dtype = torch.float32) -> float:
        if (m, k, n, dtype) not in self._rates:
            self._rates[m, k, n, dtype] = matmul_gflops(m, k, n, dtype=dtype)
        return self._rates[m, k, n, dtype]

    def matmul_seconds(self, shape: Shape, rows: int, dtype: torch.dtype = torch.float32) -> float:
        return sum(c * 2 * m * k * n / (self.rate(m, k, n, dtype) * 1e9) for m, k, n, c in shape.matmuls(rows))

    def decode_step_s(self, shape: Shape, rows: int, context: int, dtype: torch.dtype = torch.float32) -> float:
        size = torch.finfo(dtype).bits // 8
        kv_bytes = 2 * shape.layers * rows * context * (shape.hidden * shape.kv_heads // shape.heads) * size
        read = (shape.parameters * size + kv_bytes) / (self.bandwidth_gbs * 1e9)
        return max(read, self.matmul_seconds(shape, rows, dtype))

    def prefill_s(self, shape: Shape, prompts: int, prompt: int, dtype: torch.dtype = torch.float32) -> float:
        return self.matmul_seconds(shape, prompts * prompt, dtype)

    def update_s(self, shape: Shape, tokens: int, dtype: torch.dtype = torch.float32) -> float:
        adamw = 7 * shape.parameters * 4 / (self.bandwidth_gbs * 1e9)
        return 3 * self.matmul_seconds(shape, tokens, dtype) + adamw

    def report(self) -> dict:
        name = {torch.float32: "", torch.bfloat16: " bf16"}
        return {
            "matmul_gflops": self.square_gflops,
            "bandwidth_gbs": self.bandwidth_gbs,
            "threads": torch.get_num_threads(),
            "matmul_gflops_at": {
                f"{m}x{k}x{n}{name[d]}": r for (m, k, n, d), r in sorted(self._rates.items(), key=lambda x: str(x[0]))
            },
        }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--rows", type=int, default=32, help="sequences decoded at once")
    p.add_argument("--prompts", type=int, default=4, help="distinct prompts prefilled (a group shares one)")
    p.add_argument("--prompt", type=int, default=40, help="prompt tokens")
    p.add_argument("--new", type=int, default=32, help="new tokens per sequence")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    from tempering.models import load_policy

    shape = Shape.of(load_policy(a.model)[0])
    lim = Limits()
    floors = {
        "decode_step_ms": 1e3 * lim.decode_step_s(shape, a.rows, a.prompt + a.new),
        "prefill_ms": 1e3 * lim.prefill_s(shape, a.prompts, a.prompt),
        "update_s": lim.update_s(shape, a.prompts * a.prompt + a.rows * a.new),
    }
    print(json.dumps({"model": a.model, "shape": shape.__dict__, "machine": lim.report(), "floors": floors}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
