"""A real model's generation and update beside this machine's floors (`benchmarks/limits.py`), and the
quickstart's step before and after a change.

    python benchmarks/real_perf.py [--before REV] [--model smollm2-135m-instruct] [--pairs 3] [--results docs/results]

Generation: one GRPO-shaped batch (4 chat-templated arithmetic prompts x 8 samples, 32 new tokens, T=1,
no top-k / top-p), sampled by tempering's `HFSampler` (float32, and with bf16 weights where the CPU has
bf16 instructions) and by `model.generate`, alternating within each pair. End of sequence is disabled
(the sampler's EOS set emptied; `min_new_tokens` for `generate`), so all decode the same number of
tokens. The figure is seconds per call over new tokens: one decode step with its share of the prefill;
each arm against the floor in its own type.

Update: `tempering train` on the same model (8 prompts x 4 samples, 64 new tokens, lr 1e-6) with padded
and with packed micro-batches (`loss.pack`), each in its own process (its peak RSS its own): the
`update_seconds` of steps 2-3 against the floor of a forward and backward over those steps' tokens
(prompts once per group, completions once) and AdamW's passes over the weights. Then one fixed batch
(completions of 8 to 64 tokens) updated padded, packed, and packed under bf16 autocast, alternating.

Quickstart step (`--before REV`): `tempering train` with the real quickstart's settings
(`tempering demo --model ...`: 8 prompts x 8 samples, 12 new tokens), 4 steps, with the code at REV (a
git worktree) and with the working tree, alternating; seconds per step of steps 2-4 and peak RSS.

Writes real_perf.md / real_perf.json with `machine` (`matmul_gflops`, `bandwidth_gbs`), `conditions`,
`decode_step_ms` (`tempering`, `generate`, `floor`, `tempering_over_floor`, `bf16`), `update_s`
(`tempering`: the default's, `padded`, `packed`, `floor`, `tempering_over_floor`, `same_batch`),
`step_s` (`before`, `after`), `peak_rss_mb` (`step`: the packed run's), `bf16_default` (the default's
value, and the quickstart's curves under bf16 from speed_curves.json when `benchmarks/speed_curves.py`
wrote it), and carries `throughput_ratio_real`, `curve_difference_points`, `async_speedup_real` and
TRL's peak RSS from grpo_vs_trl_real.json where `benchmarks/grpo_vs_trl.py --model ...` wrote it; keys
not measured are absent, not zero.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics as st
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from limits import Limits, Shape
from real_model import WRAP

from tempering.experiments import claims_table, conditions, conditions_text, write_results

ROOT = Path(__file__).resolve().parents[1]
ROWS, PROMPTS, NEW = 32, 4, 32
QUICKSTART_EPISODES = 64  # the real quickstart's 8 prompts x 8 samples
BF16 = torch.ops.mkldnn._is_mkldnn_bf16_supported()


def prompts(tok, n: int) -> list[list[int]]:
    from tempering.envs.arithmetic import ArithmeticFamily
    from tempering.models.chat import ChatFormat

    fam = ArithmeticFamily(
        min_value=1, max_value=30, prompt_template="What is {a} {op} {b}? Answer with just the number."
    )
    fmt = ChatFormat(tok)
    return [fmt.prompt_ids(t.prompt) for t in fam.tasks("train", n, seed=0)]


def time_sampler(model, tok, batch: list[list[int]], dtype: torch.dtype | None = None) -> float:
    from tempering.rollout.sampler import HFSampler, SamplingParams

    s = HFSampler(model, tok, seed=0, dtype=dtype)
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


SAME_BATCH = {
    "float32": {"pack": False},
    "packed": {"pack": True},
    **(
        {"bf16_autocast": {"pack": False, "autocast": "bf16"}, "packed_bf16": {"pack": True, "autocast": "bf16"}}
        if BF16
        else {}
    ),
}
"""The fixed batch's update settings: padded (float32, bf16 autocast) and packed."""


def time_updates(model, tok, pairs: int) -> dict:
    """One GRPO update (8 prompts x 4 samples, completions of 8 to 64 tokens, prompt shared across the
    group, AdamW) on the same batch in each of `SAME_BATCH`'s settings, alternating; seconds per update."""
    import copy

    from tempering.train.batch import collate
    from tempering.train.optim import make_optimizer
    from tempering.train.update import UpdateSettings, policy_update
    from tempering.types import Episode, Task, Turn

    g, V = torch.Generator().manual_seed(0), model.get_output_embeddings().out_features
    eps = []
    for i, p in enumerate(prompts(tok, 8)):
        for _ in range(4):
            n = int(torch.randint(8, 65, (1,), generator=g))
            turn = Turn(torch.randint(V // 8, V, (n,), generator=g).tolist(), [-1.0] * n)
            eps.append(Episode(Task(str(i), ""), p, [turn]))
    batch = collate(eps, tok.pad_token_id)
    batch.adv_BT = torch.linspace(-1, 1, batch.size)[:, None] * batch.mask_BT
    out: dict[str, list[float]] = {k: [] for k in SAME_BATCH}
    for i in range(pairs):
        for kind in SAME_BATCH if i % 2 == 0 else reversed(SAME_BATCH):
            m = copy.deepcopy(model)
            opt = make_optimizer(m, 1e-6, 0.0, (0.9, 0.999))
            t0 = time.perf_counter()
            policy_update(m, opt, None, batch, UpdateSettings(micro_batch_size=32, **SAME_BATCH[kind]))
            out[kind].append(time.perf_counter() - t0)
            del m, opt
    tokens = {"tokens": int(batch.attention_BT.sum()), "padded_tokens": int(batch.input_ids_BT.numel())}
    return {**out, "completion_tokens": int(batch.mask_BT.sum()), **tokens}


def run_train(src: Path | None, work: Path, name: str, keys: list[str], episodes: int) -> dict:
    """`tempering train` in its own process (the code under `src`, else the working tree's), with `keys`
    (`episodes` a step); its peak RSS and per-step metrics of steps after the first."""
    out = work / name
    env = {**os.environ, **({"PYTHONPATH": str(src)} if src else {})}
    cmd = [sys.executable, "-c", WRAP, str(work / f"{name}.rss"), "train", *keys, f"run.out_dir={out}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(f"the training run {name} failed: {r.stderr[-2000:]}")
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in rows if "update_seconds" in x and x["step"] > 1]
    shutil.rmtree(out)
    return {
        "update_seconds": [x["update_seconds"] for x in steps],
        "step_seconds": [x["step_seconds"] for x in steps],
        "completion_tokens": [x["response_len"] * episodes for x in steps],
        "peak_rss_mb": json.loads((work / f"{name}.rss").read_text()),
    }


def update_keys(model: str) -> list[str]:
    """A 3-step `tempering train` on the real model: 8 prompts x 4 samples, 64 new tokens."""
    return [
        f"model.name={model}",
        "task.family=arithmetic",
        "task.args={min_value: 1, max_value: 30, read: last_number, heldout_share: 0.2, "
        "prompt_template: 'What is {a} {op} {b}? Answer with just the number.'}",
        "task.train_size=700",
        "task.heldout_size=1",
        "rollout.prompts_per_step=8",
        "rollout.group_size=4",
        "rollout.max_new_tokens=64",
        "optim.lr=1e-6",
        "run.steps=3",
        "run.eval_every=0",
        "run.eval_on_start=false",
        "run.checkpoint_every=0",
        "run.progress=false",
        "run.tensorboard=false",
    ]


def quickstart_keys(model: str) -> list[str]:
    """The real quickstart's GRPO (`tempering demo --model`), 4 steps, no evaluations or checkpoints."""
    from tempering.recipes.demo import REAL_GRPO

    t, r = REAL_GRPO["task"], REAL_GRPO["rollout"]
    args = ", ".join(f"{k}: {v!r}" if isinstance(v, str) else f"{k}: {v}" for k, v in t["args"].items())
    return [
        f"model.name={model}",
        f"task.family={t['family']}",
        f"task.args={{{args}}}",
        f"task.train_size={t['train_size']}",
        "task.heldout_size=1",
        *(f"rollout.{k}={v}" for k, v in r.items()),
        f"optim.lr={REAL_GRPO['optim']['lr']}",
        "run.steps=4",
        "run.eval_every=0",
        "run.eval_on_start=false",
        "run.checkpoint_every=0",
        "run.progress=false",
        "run.tensorboard=false",
    ]


def quickstart_steps(before: str, model: str, pairs: int, work: Path) -> dict:
    """The quickstart's seconds per step with the code at `before` and the working tree's, alternating."""
    tree = work / "before"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), before], cwd=ROOT, check=True, capture_output=True)
    try:
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for i in range(pairs):
            for arm in ("before", "after") if i % 2 == 0 else ("after", "before"):
                src = tree / "src" if arm == "before" else None
                keys = quickstart_keys(model)
                runs[arm].append(run_train(src, work, f"quickstart-{arm}-{i}", keys, QUICKSTART_EPISODES))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    rev = subprocess.run(["git", "rev-parse", "--short", before], cwd=ROOT, capture_output=True, text=True).stdout
    return {
        arm: {
            "mean": st.mean(s for r in rs for s in r["step_seconds"]),
            "per_run": [st.mean(r["step_seconds"]) for r in rs],
            "peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
        }
        for arm, rs in runs.items()
    } | {"rev": rev.strip()}


def bf16_default() -> dict:
    """The default of `loss.autocast` and the quickstart's curves under bf16 that decide it
    (speed_curves.json, where `benchmarks/speed_curves.py` wrote it)."""
    from tempering.train.config import UpdateSection

    out: dict = {"value": UpdateSection.model_fields["autocast"].default == "bf16"}
    f = Path(__file__).resolve().parents[1] / "docs" / "results" / "speed_curves.json"
    if f.is_file():
        d = json.loads(f.read_text())
        mine = d["against_padded"].get("packed_bf16", {}).get("claims", [])
        out["curves"] = {"source": f.name, "command": d["command"], "claims": {t: d["claims"][t] for t in mine}}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument(
        "--before", help="a git ref: the quickstart's step with its code, alternating with the working tree's"
    )
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
    arms = ("tempering", "generate", *(("tempering_bf16",) if BF16 else ()))
    took: dict[str, list[float]] = {k: [] for k in arms}
    for i in range(a.pairs):  # alternated, the order reversed every other pair
        for arm in arms if i % 2 == 0 else reversed(arms):
            if arm == "generate":
                took[arm].append(time_generate(model, tok, batch))
            else:
                took[arm].append(time_sampler(model, tok, batch, torch.bfloat16 if arm.endswith("bf16") else None))
        print(f"pair {i}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in took.items()), flush=True)

    def call_floor(dtype: torch.dtype) -> float:
        steps = sum(lim.decode_step_s(shape, ROWS, P + t, dtype) for t in range(NEW))
        return lim.prefill_s(shape, PROMPTS, P, dtype) + steps

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runs = {
            k: run_train(None, work, k, [*update_keys(a.model), f"loss.pack={k == 'packed'}"], 32)
            for k in ("padded", "packed")
        }
        steps = quickstart_steps(a.before, a.model, 2, work) if a.before else None
    same_batch = time_updates(model, tok, a.pairs)
    prompt_tokens = 8 * P  # each group's prompt once (prefix sharing), completions once each
    floor = lambda run: st.mean(lim.update_s(shape, prompt_tokens + int(n)) for n in run["completion_tokens"])
    default = "packed" if _default_packs() else "padded"
    ms = lambda xs: {"mean": 1e3 * st.mean(xs) / NEW, "std": 1e3 * (st.stdev(xs) if len(xs) > 1 else 0.0) / NEW}
    f32 = call_floor(torch.float32)
    data = {
        "command": " ".join(["python benchmarks/real_perf.py", *(sys.argv[1:] if argv is None else argv)]),
        "model": a.model,
        "shape": shape.__dict__,
        "generation": {"rows": ROWS, "prompts": PROMPTS, "prompt_tokens": P, "new_tokens": NEW, "pairs": a.pairs},
        "decode_step_ms": {
            "tempering": ms(took["tempering"]),
            "generate": ms(took["generate"]),
            "floor": 1e3 * f32 / NEW,
            "tempering_over_floor": st.mean(took["tempering"]) / f32,
            "generate_over_tempering": st.mean(took["generate"]) / st.mean(took["tempering"]),
            **(
                {
                    "bf16": {
                        **ms(took["tempering_bf16"]),
                        "floor": 1e3 * call_floor(torch.bfloat16) / NEW,
                        "over_floor": st.mean(took["tempering_bf16"]) / call_floor(torch.bfloat16),
                        "over_float32_floor": st.mean(took["tempering_bf16"]) / f32,
                    }
                }
                if BF16
                else {}
            ),
        },
        "update_s": {
            "tempering": {
                "mean": st.mean(runs[default]["update_seconds"]),
                "per_step": runs[default]["update_seconds"],
            },
            "default": default,
            **{k: {"mean": st.mean(r["update_seconds"]), "per_step": r["update_seconds"]} for k, r in runs.items()},
            "floor": floor(runs[default]),
            "tempering_over_floor": st.mean(runs[default]["update_seconds"]) / floor(runs[default]),
            "packed_over_floor": st.mean(runs["packed"]["update_seconds"]) / floor(runs["packed"]),
            "padded_over_floor": st.mean(runs["padded"]["update_seconds"]) / floor(runs["padded"]),
            "completion_tokens": runs[default]["completion_tokens"],
            "completion_tokens_by_run": {k: r["completion_tokens"] for k, r in runs.items()},
            "prompt_tokens": prompt_tokens,
            "same_batch": {
                **same_batch,
                "floor": lim.update_s(shape, prompt_tokens + same_batch["completion_tokens"]),
                **(
                    {"floor_bf16": lim.update_s(shape, prompt_tokens + same_batch["completion_tokens"], torch.bfloat16)}
                    if BF16
                    else {}
                ),
                **{
                    ("bf16" if k == "bf16_autocast" else k) + "_speedup": st.mean(same_batch["float32"])
                    / st.mean(same_batch[k])
                    for k in SAME_BATCH
                    if k != "float32"
                },
            },
        },
        "peak_rss_mb": {
            "step": runs[default]["peak_rss_mb"],
            **{f"step_{k}": r["peak_rss_mb"] for k, r in runs.items()},
        },
        **({"step_s": steps} if steps else {}),
        "bf16_default": bf16_default(),
        "machine": lim.report(),
        "conditions": [start, conditions()],
        "seconds": time.time() - t_start,
    }
    trl = trl_comparison(Path(a.results))
    data["peak_rss_mb"].update(trl.pop("peak_rss_mb", {}))
    data.update(trl)
    write_results(a.results, "real_perf", render(data), data)
    print(json.dumps({k: data[k] for k in ("machine", "decode_step_ms", "update_s")}, indent=1))
    return 0


def _default_packs() -> bool:
    from tempering.train.config import UpdateSection

    return bool(UpdateSection.model_fields["pack"].default)


def render(d: dict) -> str:
    m, dec, up, g = d["machine"], d["decode_step_ms"], d["update_s"], d["generation"]
    sb = up["same_batch"]
    c0, c1 = d["conditions"]
    limits = (
        f"This run's machine ({m['threads']} threads): 1024^3 float32 matmul {m['matmul_gflops']:.1f} GFLOP/s, memory "
        f"read bandwidth {m['bandwidth_gbs']:.1f} GB/s, 1-minute load {c0['load_average'][0]:.2f} at the start and "
        f"{c1['load_average'][0]:.2f} at the end."
    )
    f = lambda xs: ", ".join(f"{x:.1f}" for x in xs)
    lines = [
        f"# A real model's speed beside this machine's floors: {d['model']}",
        "",
        f"Command: `{d['command']}`; {d['seconds']:.0f} s; {conditions_text(*d['conditions'])}. The machine may "
        "be shared: compare ratios within this run. The matmul rate at each shape a step multiplies, in float32 and "
        "bf16, is in real_perf.json (`machine.matmul_gflops_at`).",
        "",
        f"## Generation: {g['prompts']} prompts x {g['rows'] // g['prompts']} samples, {g['prompt_tokens']}-token "
        f"prompts, {g['new_tokens']} new tokens, {g['pairs']} alternating pairs",
        "",
        limits,
        "",
        "| sampler | ms per new token (a decode step and its share of the prefill) | std | x its floor |",
        "| --- | --- | --- | --- |",
        f"| tempering `HFSampler` (float32) | {dec['tempering']['mean']:.1f} | {dec['tempering']['std']:.1f} | "
        f"{dec['tempering_over_floor']:.2f} |",
    ]
    if "bf16" in dec:
        b = dec["bf16"]
        lines.append(
            f"| tempering `HFSampler`, bf16 weights (with `loss.autocast=bf16`) | {b['mean']:.1f} | {b['std']:.1f} | "
            f"{b['over_floor']:.2f} (of the float32 floor: {b['over_float32_floor']:.2f}) |"
        )
    lines += [
        f"| `model.generate` (float32) | {dec['generate']['mean']:.1f} | {dec['generate']['std']:.1f} | "
        f"{dec['generate']['mean'] / dec['floor']:.2f} |",
        f"| float32 floor (weights and KV cache read once per step, or its matmuls at their measured rates) | "
        f"{dec['floor']:.1f} | | 1 |",
        *([f"| bf16 floor (the same in bf16) | {dec['bf16']['floor']:.1f} | | |"] if "bf16" in dec else []),
        "",
        f"`generate` / tempering: {dec['generate_over_tempering']:.2f}x. Goal: tempering within 1.5x of its floor.",
        "",
        "## Update: `tempering train`, 8 prompts x 4 samples, 64 new tokens, float32",
        "",
        limits,
        "",
        "| micro-batches | seconds per update (steps 2-3) | mean | x floor | peak RSS of the run (MB) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in ("padded", "packed"):
        default = " (the default)" if up["default"] == k else ""
        rss = d["peak_rss_mb"][f"step_{k}"]
        lines.append(
            f"| {k}{default} | {f(up[k]['per_step'])} | {up[k]['mean']:.1f} | {up[f'{k}_over_floor']:.2f} | {rss:.0f} |"
        )
    lines += [
        f"| floor (3x the forward's matmuls over {up['prompt_tokens']} prompt + ~"
        f"{st.mean(up['completion_tokens']):.0f} completion tokens, AdamW at the bandwidth) | | "
        f"{up['floor']:.1f} | 1 | |",
        "",
        f"Goal: the default's update within 1.5x of its floor ({up['tempering_over_floor']:.2f}x).",
        "",
        f"## One fixed batch, alternating: {sb['completion_tokens']} completion tokens (8 to 64 per sample, "
        f"{sb['padded_tokens']} positions padded)",
        "",
        limits,
        "",
        "| | seconds per update (per run) | mean | x padded float32's speed | x the float32 floor |",
        "| --- | --- | --- | --- | --- |",
    ]
    for k in SAME_BATCH:
        speed = 1.0 if k == "float32" else sb[("bf16" if k == "bf16_autocast" else k) + "_speedup"]
        lines.append(f"| {k} | {f(sb[k])} | {st.mean(sb[k]):.2f} | {speed:.2f} | {st.mean(sb[k]) / sb['floor']:.2f} |")
    lines += [f"| float32 floor | | {sb['floor']:.2f} | | 1 |"]
    if "floor_bf16" in sb:
        lines += [f"| bf16 floor (matmuls at bf16 rates) | | {sb['floor_bf16']:.2f} | | |"]
    lines.append("")
    if "step_s" in d:
        s = d["step_s"]
        lines += [
            f"## The real quickstart's step (`tempering demo --model {d['model']}`: 8 prompts x 8 samples, 12 new "
            f"tokens), before (`{s['rev']}`) and after, alternating",
            "",
            limits,
            "",
            "| code | seconds per step (per run, steps 2-4) | mean | peak RSS (MB) |",
            "| --- | --- | --- | --- |",
            *(
                f"| {arm} | {f(s[arm]['per_run'])} | {s[arm]['mean']:.1f} | {s[arm]['peak_rss_mb']:.0f} |"
                for arm in ("before", "after")
            ),
            "",
            f"after / before speed: {s['before']['mean'] / s['after']['mean']:.2f}x.",
            "",
        ]
    lines += bf16_lines(d["bf16_default"]) + trl_lines(d)
    return "\n".join(lines)


def bf16_lines(b: dict) -> list[str]:
    head = f"## bf16 autocast: {'the default' if b['value'] else 'opt-in'} (`loss.autocast`)"
    c = b.get("curves")
    if not c:
        return [head, "", "The quickstart's curves under bf16: not measured (speed_curves.json absent).", ""]
    return [
        head,
        "",
        f"The quickstart's curves under bf16 autocast (packed) against padded float32 "
        f"([speed_curves.md](speed_curves.md), `{c['command']}`):",
        "",
        *claims_table(c["claims"]),
        "",
    ]


TRL_KEYS = ("throughput_ratio_real", "curve_difference_points", "async_speedup_real")


def trl_comparison(results: Path) -> dict:
    """The real-model comparison with TRL and of asynchronous rollouts, as `grpo_vs_trl.py --model` wrote
    it (its own run, pairs and machine, in grpo_vs_trl_real.json), carried here under the same keys."""
    f = results / "grpo_vs_trl_real.json"
    if not f.is_file():
        return {}
    d = json.loads(f.read_text())
    return {
        **{k: d[k] for k in TRL_KEYS},
        "peak_rss_mb": {"tempering": d["peak_rss_mb"]["tempering"], "trl": d["peak_rss_mb"]["trl"]},
        "trl_comparison": {"source": f.name, "command": d["command"]},
    }


def trl_lines(d: dict) -> list[str]:
    if "throughput_ratio_real" not in d:
        return []
    c, rss = d["curve_difference_points"], d["peak_rss_mb"]
    return [
        f"## Against TRL and asynchronous, the same model ([grpo_vs_trl_real.md](grpo_vs_trl_real.md), its own run: "
        f"`{d['trl_comparison']['command']}`)",
        "",
        f"tempering / TRL steps/s {d['throughput_ratio_real']:.2f}x; peak RSS {rss['tempering']:.0f} MB "
        f"against TRL's {rss['trl']:.0f} MB; held-out curve, tempering minus TRL, {c['mean']:+.1f} ± {c['se']:.1f} "
        f"points; asynchronous / synchronous steps/s {d['async_speedup_real']:.2f}x.",
        "",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
