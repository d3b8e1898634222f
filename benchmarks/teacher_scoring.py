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

from tempering.models import char_tokenizer, tiny_model
from tempering.runlog import atomic_write_text
from tempering.teachers import HFTeacher


def workload(n_prompts: int, group: int, prompt_len: int, resp_len: int, vocab: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    prompts, resps = [], []
    for _ in range(n_prompts):
        p = torch.randint(4, vocab, (prompt_len - int(torch.randint(0, prompt_len // 4, (1,), generator=g)),), generator=g).tolist()
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
def batched(model, prompts, resps, pad: int) -> list[torch.Tensor]:
    seqs = [p + r for p, r in zip(prompts, resps)]
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad)
    attn = torch.zeros((len(seqs), T), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s)
        attn[b, : len(s)] = 1
    logp = model(input_ids=ids, attention_mask=attn).logits.float().log_softmax(-1)
    return [logp[b, len(p) - 1 : len(p) - 1 + len(r)].gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
            for b, (p, r) in enumerate(zip(prompts, resps))]


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    res = fn()
    return time.perf_counter() - t0, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="tiny-m")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--resp-len", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", help="write teacher_scoring.md / .json into this folder")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tok = char_tokenizer()
    model = tiny_model(a.size, seed=0).eval()
    teacher = HFTeacher(model, tok)
    prompts, resps = workload(a.prompts, a.group, a.prompt_len, a.resp_len, len(tok))
    n_tok = sum(len(r) for r in resps)
    arms = {
        "naive": lambda: naive(model, prompts, resps),
        "batched": lambda: batched(model, prompts, resps, tok.pad_token_id),
        "tempering": lambda: teacher.score(prompts, resps),
    }
    secs: dict[str, list[float]] = {k: [] for k in arms}
    results = {}
    timed(arms["tempering"])  # warm-up (allocator, kernels)
    for _ in range(a.repeats):
        for k, fn in arms.items():
            s, results[k] = timed(fn)
            secs[k].append(s)
    ref = results["naive"]
    got = results["tempering"].token_logp_BC
    err_t = max(float((got[b, : len(r)] - ref[b]).abs().max()) for b, r in enumerate(resps))
    err_b = max(float((results["batched"][b] - ref[b]).abs().max()) for b in range(len(resps)))
    med = {k: st.median(v) for k, v in secs.items()}
    doc = {
        "tokens_per_s": n_tok / med["tempering"],
        "naive_tokens_per_s": n_tok / med["naive"],
        "batched_tokens_per_s": n_tok / med["batched"],
        "speedup_vs_naive": med["naive"] / med["tempering"],
        "speedup_vs_batched": med["batched"] / med["tempering"],
        "seconds": secs,
        "scored_tokens": n_tok,
        "max_abs_logp_difference": {"tempering": err_t, "batched": err_b},
        "workload": {"model": a.size, "prompts": a.prompts, "group": a.group, "prompt_len_max": a.prompt_len, "resp_len_max": a.resp_len,
                     "sequences": len(prompts)},
        "command": "python " + " ".join(sys.argv),
        "machine": f"{platform.machine()}, {a.threads} torch thread(s), {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end, "
                   f"python {platform.python_version()}, torch {torch.__version__}",
        "repeats": a.repeats,
    }
    print(json.dumps({k: v for k, v in doc.items() if k != "seconds"}, indent=2))
    if not a.out:
        return
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "teacher_scoring.json", json.dumps(doc, indent=2) + "\n")
    w = doc["workload"]
    lines = [
        "# Teacher scoring throughput", "",
        f"Command: `{doc['command']}`  ", f"Machine: {doc['machine']}", "",
        f"Workload: a `{w['model']}` teacher scores {w['sequences']} student samples ({w['prompts']} prompts x {w['group']} samples "
        f"sharing each prompt; prompts up to {w['prompt_len_max']} tokens, responses up to {w['resp_len_max']}), {n_tok} response "
        f"tokens in all. Median of {a.repeats} repeats, arms alternated.", "",
        "| arm | what it does | scored tokens/s | seconds (median) | max abs log-prob difference to naive |",
        "| --- | --- | --- | --- | --- |",
        f"| naive | one forward of prompt + response per example | {doc['naive_tokens_per_s']:.0f} | {med['naive']:.3f} | 0 |",
        f"| batched | one padded forward of all examples, LM head everywhere | {doc['batched_tokens_per_s']:.0f} | {med['batched']:.3f} | {err_b:.1e} |",
        f"| tempering `HFTeacher` | shared prompts prefilled once (last position only), responses batched on the repeated cache | "
        f"{doc['tokens_per_s']:.0f} | {med['tempering']:.3f} | {err_t:.1e} |", "",
        f"`HFTeacher` is {doc['speedup_vs_naive']:.1f}x the naive per-example pass and {doc['speedup_vs_batched']:.1f}x one padded batch.",
        "",
    ]
    atomic_write_text(out / "teacher_scoring.md", "\n".join(lines))


if __name__ == "__main__":
    main()
