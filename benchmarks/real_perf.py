"""A real model's generation and update beside this machine's floors (`benchmarks/limits.py`).

    python benchmarks/real_perf.py [--model smollm2-135m-instruct] [--pairs 3] [--results docs/results]

Generation: one GRPO-shaped batch (4 chat-templated arithmetic prompts x 8 samples, 32 new tokens, T=1,
no top-k / top-p), sampled by tempering's `HFSampler` and by `model.generate`, alternating within each
pair. End of sequence is disabled in both (the sampler's EOS set emptied; `min_new_tokens` for
`generate`), so both decode exactly the same number of tokens. The figure is seconds per call over new
tokens: one decode step with its share of the prefill.

Update: `tempering train` on the same model (8 prompts x 4 samples, 64 new tokens, lr 1e-6), its
`update_seconds` per step after the first, against the floor of a forward and backward over that
step's tokens (prompts once per group, completions once) and AdamW's passes over the weights.

The same update in float32 and under bf16 autocast, on one fixed batch, alternating (where the CPU has
bf16 instructions).

Writes real_perf.md / real_perf.json with `machine` (`matmul_gflops`, `bandwidth_gbs`), `decode_step_ms`
(`tempering`, `generate`, `floor`), `update_s` (`tempering`, `floor`, `same_batch`), and carries
`throughput_ratio_real`, `peak_rss_mb`, `curve_difference_points`, `async_speedup_real` from
grpo_vs_trl_real.json where `benchmarks/grpo_vs_trl.py --model ...` wrote it; keys not measured are
absent, not zero.
"""

from __future__ import annotations

import argparse
import json
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from limits import Limits, Shape

from tempering.experiments import conditions, conditions_text, write_results

ROWS, PROMPTS, NEW = 32, 4, 32


def prompts(tok, n: int) -> list[list[int]]:
    from tempering.envs.arithmetic import ArithmeticFamily
    from tempering.models.chat import ChatFormat

    fam = ArithmeticFamily(
        min_value=1, max_value=30, prompt_template="What is {a} {op} {b}? Answer with just the number."
    )
    fmt = ChatFormat(tok)
    return [fmt.prompt_ids(t.prompt) for t in fam.tasks("train", n, seed=0)]


def time_sampler(model, tok, batch: list[list[int]]) -> float:
    from tempering.rollout.sampler import HFSampler, SamplingParams

    s = HFSampler(model, tok, seed=0)
    s.eos_ids = []  # every row decodes NEW tokens, as generate does with min_new_tokens
    t0 = time.perf_counter()
    out = s.sample(batch, SamplingParams(max_new_tokens=NEW, temperature=1.0))
    dt = time.perf_counter() - t0
    assert all(len(x.ids) == NEW for x in out)
    return dt


@torch.inference_mode()
def time_generate(model, tok, batch: list[list[int]]) -> float:
    P = max(len(x) for x in batch)
    ids = torch.full((len(batch), P), tok.pad_token_id)
    attn = torch.zeros((len(batch), P), dtype=torch.long)
    for i, x in enumerate(batch):
        ids[i, P - len(x) :], attn[i, P - len(x) :] = torch.tensor(x), 1
    t0 = time.perf_counter()
    out = model.generate(
        input_ids=ids,
        attention_mask=attn,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=NEW,
        min_new_tokens=NEW,
        pad_token_id=tok.pad_token_id,
    )
    dt = time.perf_counter() - t0
    assert out.shape[1] == P + NEW
    return dt


def time_updates(model, tok, pairs: int, completion_len: int = 38) -> dict:
    """One GRPO update (8 prompts x 4 samples, prompt shared across the group, AdamW) on the same batch in
    float32 and under bf16 autocast, alternating; seconds per update of each."""
    import copy

    from tempering.train.batch import collate
    from tempering.train.optim import make_optimizer
    from tempering.train.update import UpdateSettings, policy_update
    from tempering.types import Episode, Task, Turn

    g = torch.Generator().manual_seed(0)
    eps = [
        Episode(
            Task(str(i), ""),
            p,
            [Turn(torch.randint(100, 40000, (completion_len,), generator=g).tolist(), [-1.0] * completion_len)],
        )
        for i, p in enumerate(prompts(tok, 8))
        for _ in range(4)
    ]
    batch = collate(eps, tok.pad_token_id)
    batch.adv_BT = torch.linspace(-1, 1, batch.size)[:, None] * batch.mask_BT
    out: dict[str, list[float]] = {"none": [], "bf16": []}
    for i in range(pairs):
        for kind in ("none", "bf16") if i % 2 == 0 else ("bf16", "none"):
            m = copy.deepcopy(model)
            opt = make_optimizer(m, 1e-6, 0.0, (0.9, 0.999))
            t0 = time.perf_counter()
            policy_update(m, opt, None, batch, UpdateSettings(micro_batch_size=32, autocast=kind))
            out[kind].append(time.perf_counter() - t0)
            del m, opt
    return {"float32": out["none"], "bf16_autocast": out["bf16"], "tokens": int(batch.attention_BT.sum())}


def update_run(model_name: str, work: Path) -> dict:
    """A 3-step `tempering train` on the real model; the update seconds and token counts of steps 2-3."""
    out = work / "train"
    cmd = [
        sys.executable,
        "-m",
        "tempering.cli",
        "train",
        f"model.name={model_name}",
        "task.family=arithmetic",
        "task.args={min_value: 1, max_value: 30, read: last_number, heldout_share: 0.2, "
        "prompt_template: 'What is {a} {op} {b}? Answer with just the number.'}",
        "task.train_size=700",
        "task.heldout_size=1",
        "rollout.prompts_per_step=8",
        "rollout.group_size=4",
        "rollout.max_new_tokens=64",
        "run.steps=3",
        "run.eval_every=0",
        "run.eval_k=1",
        "run.checkpoint_every=0",
        "run.progress=false",
        "run.tensorboard=false",
        f"run.out_dir={out}",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"the training run failed: {r.stderr[-2000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in rows if "update_seconds" in x and x["step"] > 1]
    return {
        "update_seconds": [x["update_seconds"] for x in steps],
        "gen_seconds": [x["gen_seconds"] for x in steps],
        "completion_tokens": [x["response_len"] * 32 for x in steps],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--results", default="docs/results")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    from tempering.models import load_policy

    start, t_start = conditions(), time.time()
    model, tok = load_policy(a.model)
    model.eval()
    shape, lim = Shape.of(model), Limits()
    groups = prompts(tok, PROMPTS)
    batch = [x for x in groups for _ in range(ROWS // PROMPTS)]
    P = max(len(x) for x in groups)
    ours, theirs = [], []
    for i in range(a.pairs):  # alternated, the first of each pair switching
        for arm in ("tempering", "generate") if i % 2 == 0 else ("generate", "tempering"):
            if arm == "tempering":
                ours.append(time_sampler(model, tok, batch))
            else:
                theirs.append(time_generate(model, tok, batch))
        print(f"pair {i}: tempering {ours[-1]:.2f} s, generate {theirs[-1]:.2f} s", flush=True)
    call_floor = lim.prefill_s(shape, PROMPTS, P) + sum(lim.decode_step_s(shape, ROWS, P + t) for t in range(NEW))
    with tempfile.TemporaryDirectory() as work:
        up = update_run(a.model, Path(work))
    bf16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    same_batch = time_updates(model, tok, a.pairs) if bf16 else None
    prompt_tokens = 8 * P  # each group's prompt once (prefix sharing), completions once each
    update_floor = [lim.update_s(shape, prompt_tokens + int(n)) for n in up["completion_tokens"]]
    ms = lambda xs: {"mean": 1e3 * st.mean(xs) / NEW, "std": 1e3 * (st.stdev(xs) if len(xs) > 1 else 0.0) / NEW}
    data = {
        "command": " ".join(["python benchmarks/real_perf.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": a.model,
        "shape": shape.__dict__,
        "machine": lim.report(),
        "conditions": [start, conditions()],
        "generation": {"rows": ROWS, "prompts": PROMPTS, "prompt_tokens": P, "new_tokens": NEW, "pairs": a.pairs},
        "decode_step_ms": {
            "tempering": ms(ours),
            "generate": ms(theirs),
            "floor": 1e3 * call_floor / NEW,
            "tempering_over_floor": st.mean(ours) / call_floor,
            "generate_over_tempering": st.mean(theirs) / st.mean(ours),
        },
        "update_s": {
            "tempering": {"mean": st.mean(up["update_seconds"]), "per_step": up["update_seconds"]},
            "floor": st.mean(update_floor),
            "tempering_over_floor": st.mean(up["update_seconds"]) / st.mean(update_floor),
            "completion_tokens": up["completion_tokens"],
            "prompt_tokens": prompt_tokens,
            "same_batch": same_batch
            and {
                **same_batch,
                "bf16_speedup": st.mean(same_batch["float32"]) / st.mean(same_batch["bf16_autocast"]),
            },
        },
        "seconds": time.time() - t_start,
    }
    data.update(trl_comparison(Path(a.results)))
    write_results(a.results, "real_perf", render(data), data)
    print(json.dumps({k: data[k] for k in ("machine", "decode_step_ms", "update_s")}, indent=1))
    return 0


def render(d: dict) -> str:
    m, dec, up, g = d["machine"], d["decode_step_ms"], d["update_s"], d["generation"]
    return "\n".join(
        [
            f"# A real model's speed beside this machine's floors: {d['model']}",
            "",
            f"Command: `{d['command']}`; {conditions_text(*d['conditions'])}; {d['seconds']:.0f} s.",
            f"Machine limits measured in the same run ({m['threads']} threads): 1024^3 float32 matmul "
            f"{m['matmul_gflops']:.1f} GFLOP/s, memory read bandwidth {m['bandwidth_gbs']:.1f} GB/s; the matmul rate "
            "at each shape a step multiplies is in real_perf.json (`machine.matmul_gflops_at`).",
            "",
            f"## Generation: {g['prompts']} prompts x {g['rows'] // g['prompts']} samples, {g['prompt_tokens']}-token "
            f"prompts, {g['new_tokens']} new tokens, {g['pairs']} alternating pairs",
            "",
            "| sampler | ms per new token (a decode step and its share of the prefill) | std | x floor |",
            "| --- | --- | --- | --- |",
            f"| tempering `HFSampler` | {dec['tempering']['mean']:.1f} | {dec['tempering']['std']:.1f} | "
            f"{dec['tempering_over_floor']:.2f} |",
            f"| `model.generate` | {dec['generate']['mean']:.1f} | {dec['generate']['std']:.1f} | "
            f"{dec['generate']['mean'] / dec['floor']:.2f} |",
            f"| floor (weights and KV cache read once per step, or its matmuls at their measured rates) | "
            f"{dec['floor']:.1f} | | 1 |",
            "",
            f"`generate` / tempering: {dec['generate_over_tempering']:.2f}x.",
            "",
            "## Update: `tempering train`, 8 prompts x 4 samples, 64 new tokens",
            "",
            "| | seconds per update | x floor |",
            "| --- | --- | --- |",
            f"| tempering (steps 2-3: {', '.join(f'{x:.1f}' for x in up['tempering']['per_step'])}) | "
            f"{up['tempering']['mean']:.1f} | {up['tempering_over_floor']:.2f} |",
            f"| floor (3x the forward's matmuls over {up['prompt_tokens']} prompt + ~{st.mean(up['completion_tokens']):.0f} "
            f"completion tokens, AdamW at the bandwidth) | {up['floor']:.1f} | 1 |",
            "",
            *autocast_lines(up.get("same_batch")),
            *trl_lines(d),
        ]
    )


TRL_KEYS = ("throughput_ratio_real", "peak_rss_mb", "curve_difference_points", "async_speedup_real")


def trl_comparison(results: Path) -> dict:
    """The real-model comparison with TRL and of asynchronous rollouts, as `grpo_vs_trl.py --model` wrote
    it (its own run, pairs and machine, in grpo_vs_trl_real.json), carried here under the same keys."""
    f = results / "grpo_vs_trl_real.json"
    if not f.is_file():
        return {}
    d = json.loads(f.read_text())
    return {**{k: d[k] for k in TRL_KEYS}, "trl_comparison": {"source": f.name, "command": d["command"]}}


def trl_lines(d: dict) -> list[str]:
    if "throughput_ratio_real" not in d:
        return []
    c, rss = d["curve_difference_points"], d["peak_rss_mb"]
    return [
        f"## Against TRL and asynchronous, the same model ([grpo_vs_trl_real.md](grpo_vs_trl_real.md), its own run: "
        f"`{d['trl_comparison']['command']}`)",
        "",
        f"tempering / TRL steps/s {d['throughput_ratio_real']:.2f}x; peak RSS {rss['tempering']:.0f} MB against TRL's "
        f"{rss['trl']:.0f} MB; held-out curve, tempering minus TRL, {c['mean']:+.1f} ± {c['se']:.1f} points; "
        f"asynchronous / synchronous steps/s {d['async_speedup_real']:.2f}x.",
        "",
    ]


def autocast_lines(b: dict | None) -> list[str]:
    if not b:
        return ["bf16 autocast: not measured (this CPU has no bf16 instructions; tempering refuses it here)."]
    f = lambda xs: ", ".join(f"{x:.1f}" for x in xs)
    return [
        f"## The same update in float32 and under bf16 autocast (`loss.autocast=bf16`), one fixed batch of "
        f"{b['tokens']} tokens, alternating",
        "",
        "| | seconds per update (per run) | mean |",
        "| --- | --- | --- |",
        f"| float32 | {f(b['float32'])} | {st.mean(b['float32']):.1f} |",
        f"| bf16 autocast | {f(b['bf16_autocast'])} | {st.mean(b['bf16_autocast']):.1f} |",
        "",
        f"bf16 autocast / float32 speed: {b['bf16_speedup']:.2f}x.",
        "",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
