"""Teacher scoring throughput: `HFTeacher` vs a naive forward pass per example, on the same workload.

The workload is one distillation step's worth of scoring: N prompts x G samples each (the samples of a
group share their prompt), random token ids of given lengths, scored by a tiny teacher on the CPU.
Arms, alternated in every repeat:
  - naive: one forward of prompt + response per example, log-softmax over every position;
  - batched: all examples in one padded forward (no prompt sharing), LM head over every position;
  - tempering: `HFTeacher.score` (each distinct prompt prefilled once with only its last position through
    the LM head, the cache repeated for its G responses, responses batched).
Tokens/s counts scored response tokens. All arms must agree on the log-probs (checked).

    python benchmarks/teacher_scoring.py --out docs/results
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics as st
import sys
import time
from pathlib import Path

import torch
from transformers import LlamaForCausalLM

from tempering.models import char_tokenizer, tiny_config, tiny_model
from tempering.runlog import atomic_write_text
from tempering.teachers import HFTeacher


def workload(n_prompts: int, group: int, prompt_len: int, resp_len: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompts, resps = [], []
    for _ in range(n_prompts):
        p = torch.randint(
            4, vocab, (prompt_len - int(torch.randint(0, prompt_len // 4, (1,), generator=g)),), generator=g
        ).tolist()
        for _ in range(group):
            n = resp_len - int(torch.randint(0, resp_len // 2, (1,), generator=g))
            prompts.append(p)
            resps.append(torch.randint(4, vocab, (n,), generator=g).tolist())
    return prompts, resps


@torch.inference_mode()
def naive(model, prompts, resps) -> list[torch.Tensor]:
    out = []
    for p, r in zip(prompts, resps):
        logp = model(input_ids=torch.tensor([p + r])).logits[0].float().log_softmax(-1)
        out.append(logp[len(p) - 1 : len(p) - 1 + len(r)].gather(-1, torch.tensor(r)[:, None]).squeeze(-1))
    return out


@torch.inference_mode()
def batched(model, prompts, resps, pad: int, max_logits: int) -> list[torch.Tensor]:
    """Padded forwards of whole sequences, as many rows at a time as the logits budget allows."""
    out = []
    T = max(len(p) + len(r) for p, r in zip(prompts, resps))
    rows = max(1, max_logits // (T * model.config.vocab_size))
    for i in range(0, len(prompts), rows):
        ps, rs = prompts[i : i + rows], resps[i : i + rows]
        ids = torch.full((len(ps), T), pad)
        attn = torch.zeros((len(ps), T), dtype=torch.long)
        for b, (p, r) in enumerate(zip(ps, rs)):
            ids[b, : len(p) + len(r)] = torch.tensor(p + r)
            attn[b, : len(p) + len(r)] = 1
        logp = model(input_ids=ids, attention_mask=attn).logits.float().log_softmax(-1)
        out += [
            logp[b, len(p) - 1 : len(p) - 1 + len(r)].gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
            for b, (p, r) in enumerate(zip(ps, rs))
        ]
    return out


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    res = fn()
    return time.perf_counter() - t0, res


def measure(size: str, vocab: int | None, a) -> dict:
    """One workload: every arm `a.repeats` times, alternated; medians and agreement with the naive arm."""
    tok = char_tokenizer()
    if vocab is None:
        model = tiny_model(size, seed=0).eval()
    else:  # the same body with a real-sized LM head (token ids are random anyway)
        torch.manual_seed(0)
        cfg = tiny_config(size)
        cfg.vocab_size = vocab
        model = LlamaForCausalLM(cfg).eval()
    V = model.config.vocab_size
    teacher = HFTeacher(model, tok, max_logits=a.max_logits)
    prompts, resps = workload(a.prompts, a.group, a.prompt_len, a.resp_len, V)
    n_tok = sum(len(r) for r in resps)
    arms = {
        "naive": lambda: naive(model, prompts, resps),
        "batched": lambda: batched(model, prompts, resps, tok.pad_token_id, a.max_logits),
        "tempering": lambda: teacher.score(prompts, resps),
    }
    secs: dict[str, list[float]] = {k: [] for k in arms}
    results = {}
    timed(arms["tempering"])  # warm-up (allocator, kernels)
    for _ in range(a.repeats):
        for k, fn in arms.items():
            t, results[k] = timed(fn)
            secs[k].append(t)
    ref = results["naive"]
    got = results["tempering"].token_logp_BC
    med = {k: st.median(v) for k, v in secs.items()}
    return {
        "tokens_per_s": n_tok / med["tempering"],
        "naive_tokens_per_s": n_tok / med["naive"],
        "batched_tokens_per_s": n_tok / med["batched"],
        "speedup_vs_naive": med["naive"] / med["tempering"],
        "speedup_vs_batched": med["batched"] / med["tempering"],
        "median_seconds": med,
        "seconds": secs,
        "scored_tokens": n_tok,
        "max_abs_logp_difference": {
            "tempering": max(float((got[b, : len(r)] - ref[b]).abs().max()) for b, r in enumerate(resps)),
            "batched": max(float((results["batched"][b] - ref[b]).abs().max()) for b in range(len(resps))),
        },
        "workload": {
            "model": size,
            "vocab": V,
            "prompts": a.prompts,
            "group": a.group,
            "prompt_len_max": a.prompt_len,
            "resp_len_max": a.resp_len,
            "sequences": len(prompts),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny-m")
    ap.add_argument(
        "--large-vocab",
        type=int,
        default=32000,
        help="second workload: the same model with this LM-head size (0 = skip)",
    )
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--resp-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-logits", type=int, default=1 << 25, help="logits elements held at once by the batched arms")
    ap.add_argument("--out", help="write teacher_scoring.md / .json into this folder")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    small = measure(a.size, None, a)
    large = measure(a.size, a.large_vocab, a) if a.large_vocab else None
    doc = {
        **{
            k: small[k]
            for k in (
                "tokens_per_s",
                "naive_tokens_per_s",
                "batched_tokens_per_s",
                "speedup_vs_naive",
                "speedup_vs_batched",
            )
        },
        "builtin_vocab": small,
        "large_vocab": large,
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.machine()}, {a.threads} torch thread(s), {os.cpu_count()} cores shared with other jobs "
        f"(load average {os.getloadavg()[0]:.1f} at the end), python {platform.python_version()}, torch {torch.__version__}",
        "repeats": a.repeats,
    }
    print(json.dumps({k: v for k, v in doc.items() if k not in ("builtin_vocab", "large_vocab")}, indent=2))
    if not a.out:
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "teacher_scoring.json", json.dumps(doc, indent=2) + "\n")
    w = small["workload"]
    lines = [
        "# Teacher scoring throughput",
        "",
        f"Command: `{doc['command']}`  ",
        f"Machine: {doc['machine']}",
        "",
        f"Workload: a `{w['model']}` teacher scores {w['sequences']} student samples ({w['prompts']} prompts x {w['group']} samples "
        f"sharing each prompt; prompts up to {w['prompt_len_max']} tokens, responses up to {w['resp_len_max']}), "
        f"{small['scored_tokens']} response tokens in all. Median of {a.repeats} repeats, arms alternated. The second workload "
        "gives the same model an LM head of a real model's size, where computing it only where needed matters most.",
        "",
        "| vocabulary | arm | what it does | scored tokens/s | seconds (median) | max abs log-prob difference to naive |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    what = {
        "naive": "one forward of prompt + response per example",
        "batched": "padded forwards of whole sequences, LM head everywhere",
        "tempering": "`HFTeacher`: shared prompts prefilled once (LM head on their last position only), responses batched on the repeated cache",
    }
    for r in [x for x in (small, large) if x]:
        for arm, key in (
            ("naive", "naive_tokens_per_s"),
            ("batched", "batched_tokens_per_s"),
            ("tempering", "tokens_per_s"),
        ):
            err = r["max_abs_logp_difference"].get(arm, 0.0)
            lines.append(
                f"| {r['workload']['vocab']} | {arm} | {what[arm]} | {r[key]:.0f} | {r['median_seconds'][arm]:.3f} | {err:.1e} |"
            )
    lines.append("")
    for r in [x for x in (small, large) if x]:
        lines.append(
            f"Vocabulary {r['workload']['vocab']}: `HFTeacher` is {r['speedup_vs_naive']:.1f}x the naive per-example pass "
            f"and {r['speedup_vs_batched']:.1f}x the padded batch.  "
        )
    lines += [
        "",
        "On one CPU thread batching brings no parallelism, so the gain comes from computing less: the prompt of a "
        "group once instead of G times, and the LM head only on the positions that are scored. What batching adds on a GPU is not measured here.",
        "",
    ]
    atomic_write_text(out / "teacher_scoring.md", "\n".join(lines))


if __name__ == "__main__":
    main()
