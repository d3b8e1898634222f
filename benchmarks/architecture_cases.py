"""The rerun cases of `benchmarks/architecture.py`, run with one version of tempering first on the path:

    PYTHONPATH=SRC python benchmarks/architecture_cases.py OUT TEACHER MODEL RENAMED_JSON CASES TIMING_KEYS

Prints one JSON line per case: digests of its final weights, of every metric row (timing keys left out,
renamed metrics mapped) and of its held-out history. Written against the verb registry both before and
after the method registry (`Verb.runner()`, else `load(Verb.run)`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from safetensors.torch import load_file

from tempering.config import build
from tempering.envs.pool import PoolFamily
from tempering.envs.registry import make_family
from tempering.recipes.verbs import VERBS, load

TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 40, "heldout_size": 4}


def base(model: str, out: Path) -> dict:
    return {
        "model": {"name": model},
        "task": dict(TASK),
        "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
        "loss": {"micro_batch_size": 3, "max_grad_norm": 0.5},
        "optim": {"lr": 1e-3},
        "run": {
            "steps": 3,
            "out_dir": str(out),
            "eval_every": 2,
            "eval_size": 2,
            "checkpoint_every": 2,
            "progress": False,
            "tensorboard": False,
            "log_samples": 4,
        },
    }


def tu_opd_rates(path: Path) -> str:
    ids = [t.id for t in make_family(TASK["family"], **TASK["args"]).tasks("train", 40)]
    table = {i: {"a": 1.0 if k % 3 else 0.0, "b": 0.6 if k % 2 else 0.0} for k, i in enumerate(ids)}
    path.write_text(json.dumps({"tasks": table}))
    return str(path)


def case(name: str, out: Path, model: str, teacher: str):
    """A function that runs the case and returns its history."""
    c, kw, verb = base(model, out), {}, name.split("+")[0]
    if name.startswith("train+dynamic_sampling"):  # pairs: groups with no spread, dropped and refilled, are common
        c["loss"]["dynamic_sampling"] = True
        c["rollout"]["group_size"] = 2
    if name == "train+dynamic_sampling+kl_in_reward":
        c["loss"] |= {"kl_coef": 0.1, "kl_in_reward": True}
    if name == "train+kl":
        c["loss"]["kl_coef"] = 0.1
    if name == "train+async":
        c["rollout"]["async_steps"] = 1
        c["loss"]["rollout_correction"] = "tis"
    if name.startswith("train+leap"):  # LEAP's rank tournament (a group reward) and its turn credit
        c["rollout"] |= {"max_turns": 2, "prune": "dcp"}
        c["loss"]["advantage"] = "leap"
        if name.endswith("dynamic_sampling"):
            c["loss"]["dynamic_sampling"] = True
    if name == "train+tcpo":
        c["rollout"]["max_turns"] = 2
        c["loss"]["advantage"] = "tcpo"
    if name == "rgrpo_round":  # one round of Residual GRPO: GRPO on a pool
        verb = "train"
        arith = make_family(TASK["family"], **TASK["args"])
        kw["family"] = PoolFamily(arith, arith.tasks("train", 40)[:20])
    if verb == "ppo":
        c["critic"] = {"kind": "head" if name == "ppo+head" else "model", "lr": 1e-3, "pretrain_steps": 1}
    if verb == "rft":
        c["rft"] = {"min_reward": 0.5, "reject_truncated": False}
    if verb == "distill":
        c["teacher"] = {"path": teacher}
        if name == "distill+jsd_topk":
            c["distill"] = {"loss": "jsd_topk", "top_k": 8}
    if verb == "direct-opd":
        pairs = [{"teacher": {"path": model}, "reference": {"path": teacher}}]
        if name == "direct-opd+two_pairs":
            pairs.append({"teacher": {"path": teacher}, "reference": {"path": model}})
        c["direct_opd"] = {"pairs": pairs, "top_k": 8}
    if verb == "tu-opd":
        rates = tu_opd_rates(out.parent / "tu-opd-rates.json")
        c["tu_opd"] = {"teachers": {"a": {"path": model}, "b": {"path": teacher}}, "pass_rates": rates, "empty": "grpo"}
    if verb == "demo":  # the quickstart's two stages, shortened
        from tempering.recipes.demo import run_demo

        over = ["pretrain.run.steps=60", "pretrain.run.eval_every=30", "train.run.steps=3"]
        over += ["train.task.heldout_size=8", "train.rollout.prompts_per_step=4"]
        return lambda: run_demo(out, 0, over, progress=False)
    if verb == "cuda-agent":  # every stage, from the warm start; its kernels timed by a fixed verifier
        from tempering.envs.kernels.agent import SketchAgentFamily

        fam = SketchAgentFamily(problem_names=["01_relu", "13_scale_shift", "34_residual_relu"], answer_keys=("vec",))
        fam._verifier = FixedTimings()
        c = {k: c[k] for k in ("model", "loss", "run")} | {
            "task": {"family": "kernel_sketch_agent", "train_size": 20, "heldout_size": 1},
            "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 24, "max_turns": 2},
            "pretrain": {"steps": 20, "lr": 3e-3, "batch_size": 8},
            "warmup": {"steps": 2},
            "rft": {"steps": 1, "min_reward": -2.0},
            "critic_pretrain": {"steps": 1},
            "rl": {"steps": 2},
        }
        c["run"] = {k: v for k, v in c["run"].items() if k != "steps"} | {"eval_k": 2}
        from tempering.recipes.cuda_agent import CudaAgentConfig, cuda_agent

        def columns() -> dict:  # the report's numbers (its paths name the run folder)
            out = cuda_agent(build(CudaAgentConfig, c), family=fam)
            return {
                s: {k: v for k, v in cols.items() if k != "model"} for s, cols in out.items() if isinstance(cols, dict)
            }

        return columns
    if verb == "expand-compress":  # two RGRPO rounds on the sums, then TU-OPD of both into one student
        rounds = {k: c[k] for k in ("model", "task", "rollout", "loss", "optim")}
        rounds["run"] = {k: v for k, v in c["run"].items() if k != "out_dir"} | {"steps": 2}
        rounds["rgrpo"] = {"rounds": 2, "pass_samples": 2, "kappa": 0.5}
        compress = {k: c[k] for k in ("rollout", "loss", "optim")} | {"run": rounds["run"]}
        compress["tu_opd"] = {"rho": 0.5, "residual": True, "empty": "grpo"}
        c = {"run": {"out_dir": str(out)}, "expand": rounds, "compress": compress}
    v = VERBS[verb]
    run = v.runner() if hasattr(v, "runner") else load(v.run)
    return lambda: run(build(load(v.schema), c), **kw)


class FixedTimings:
    """Kernel verification without a compiler or a clock: vectorised sketches (`omp simd`) beat eager
    PyTorch but not torch.compile (CUDA Agent reward 2), the others are correct and slower (1)."""

    async def verify(self, problem, text):
        from tempering.envs.kernels.verifier import KernelResult

        t = 2.0 if "omp simd" in text else 6.0
        reward = 2 if t < 3 else 1
        return KernelResult(
            problem=problem.name,
            backend="c",
            status="correct",
            compiled=True,
            correct=True,
            t_ms=t,
            t_eager_ms=3.0,
            t_compile_ms=1.8,
            speedup_eager=3.0 / t,
            speedup_compile=1.8 / t,
            cuda_agent_reward=reward,
        )


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def weights(out: Path) -> str:
    h = hashlib.sha256()
    files = sorted(out.rglob("final/*.safetensors")) or sorted(out.rglob("model/*.safetensors"))
    for f in files:
        for k, t in sorted(load_file(f).items()):
            h.update(k.encode())
            h.update(t.float().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    root, teacher, model = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    renamed, names, timing = json.loads(sys.argv[4]), sys.argv[5].split(","), sys.argv[6].split(",")
    for name in names:
        out = root / name
        out.parent.mkdir(parents=True, exist_ok=True)
        hist = case(name, out, model, teacher)()
        rows = []
        for f in sorted(out.rglob("metrics.jsonl")):
            for line in f.read_text().splitlines():
                r = {renamed.get(k, k): v for k, v in json.loads(line).items()}
                rows.append({k: v for k, v in r.items() if not any(s in k for s in timing)})
        hist = {k: v for k, v in hist.items() if not any(s in k for s in ("seconds", "run_dir", "threads"))}
        row = {"case": name, "weights": weights(out), "metrics": digest(rows), "history": digest(hist)}
        row["extra_rounds"] = sum(r.get("resample_rounds", 0) for r in rows)  # dynamic sampling's refills
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
