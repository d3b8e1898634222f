"""Composition on the one training loop: every verb data-parallel, every option combination defined.

    python examples/composition/run.py            # docs/results/composition.{md,json}
    python examples/composition/run.py --combinations-only   # 2 and 3 again, 1 kept from the last full run

1. Every training verb's update on 2 CPU ranks (torchrun, gloo; DDP and FSDP2) against one process on
   the whole batch, on the same pre-rolled groups (tests/distributed/verb_worker.py): the largest
   gradient difference per verb and strategy.
2. The combination matrix (matrix.py): every RL credit x {overlong, kl_in_reward, dynamic_sampling} x
   {single-, multi-turn}, refused or effective as documented, never a silent no-op.
3. Imports that run up the layers (tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from tempering.experiments import machine, write_results
from tempering.methods.pretrain import PretrainConfig, pretrain
from tempering.models import char_tokenizer, save_policy, tiny_model
from tempering.recipes.runner import trainer
from tempering.rollout.engine import RolloutStats
from tempering.types import Group

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def warm_start(work: Path) -> str:
    cfg = PretrainConfig.model_validate(
        {
            "model": {"name": "tiny-xs"},
            "task": {
                "family": "arithmetic",
                "args": {"min_value": 0, "max_value": 30},
                "train_size": 800,
                "heldout_size": 60,
            },
            "rollout": {"prompts_per_step": 32, "max_new_tokens": 4},
            "optim": {"lr": 3e-3},
            "run": {
                "steps": 250,
                "eval_every": 0,
                "out_dir": str(work / "pretrain"),
                "progress": False,
            },
        }
    )
    return pretrain(cfg)["model"]


def parallel_equivalence(work: Path) -> dict:
    worker = _load("verb_worker", ROOT / "tests" / "distributed" / "verb_worker.py")

    model = warm_start(work)
    fresh = str(save_policy(tiny_model("tiny-xs", seed=7), char_tokenizer(), work / "fresh"))
    t = trainer("train", worker.base(model, work / "roll"))
    groups = asyncio.run(t.collector.rollout(t.sampler, RolloutStats()))
    groups.append(Group(groups[0].task, [copy.deepcopy(groups[0].episodes[0]) for _ in range(4)]))
    torch.save(groups, work / "groups.pt")
    one = worker.run(str(work / "groups.pt"), model, fresh, work / "one")
    out: dict[str, dict] = {}
    for strategy in ("ddp", "fsdp2"):
        dest = work / f"two-{strategy}.pt"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        cmd += [str(worker.__file__), str(work / "groups.pt"), model, fresh, str(dest), "--strategy", strategy]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
        two = torch.load(dest, weights_only=False)
        for case in worker.CASES:
            diff = max(float((two[case]["grads"][k] - g).abs().max()) for k, g in one[case]["grads"].items())
            scale = max(float(g.abs().max()) for g in one[case]["grads"].values())
            state_same = all(
                abs(two[case]["state"][k] - v) <= 1e-6 * max(1.0, abs(v)) for k, v in one[case]["state"].items()
            )
            row = out.setdefault(case, {"verb": case.split("+")[0]})  # "train+kl" is a case of train
            row[strategy] = {"max_abs_grad_diff": diff, "max_abs_grad": scale, "state_equal": state_same}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(ROOT / "docs" / "results"))
    p.add_argument(
        "--combinations-only",
        action="store_true",
        help="rerun the combinations and the layers (seconds); keep the data-parallel rows (a quarter of an "
        "hour) of the last full run, from the results folder's composition.json",
    )
    a = p.parse_args(argv)
    t0 = time.time()
    load = Path("/proc/loadavg").read_text().split()[:3]
    matrix = _load("composition_matrix", Path(__file__).parent / "matrix.py").matrix()
    layers = _load("test_layers", ROOT / "tests" / "test_layers.py")
    upward = layers.upward_imports()
    parallel_run: dict = {}
    if a.combinations_only:
        last = json.loads((Path(a.results) / "composition.json").read_text())
        parallel_run = last.get("parallel_run") or {
            k: last[k] for k in ("command", "machine", "load_at_start", "seconds")
        }
        cases = last["cases"]
    else:
        with tempfile.TemporaryDirectory() as tmp:
            cases = parallel_equivalence(Path(tmp))
    tol = 2e-6
    verbs: dict[str, dict] = {}
    for case, row in cases.items():
        diff = max(row[s]["max_abs_grad_diff"] for s in ("ddp", "fsdp2"))
        ok = diff <= tol and all(row[s]["state_equal"] for s in ("ddp", "fsdp2"))
        v = verbs.setdefault(row["verb"], {"data_parallel_equivalent": True, "max_abs_grad_diff": 0.0, "cases": []})
        v["data_parallel_equivalent"] = v["data_parallel_equivalent"] and ok
        v["max_abs_grad_diff"] = max(v["max_abs_grad_diff"], diff)
        v["cases"].append(case)
    status = [r["status"] for r in matrix]
    data = {
        "verbs": verbs,
        "cases": cases,
        "combinations_total": len(matrix),
        "combinations_refused": status.count("refused"),
        "combinations_effective": status.count("effective"),
        "silent_noops": status.count("noop"),
        "combinations": matrix,
        "upward_imports": len(upward),
        "upward_import_list": upward,
        "tolerance": tol,
        "command": "python examples/composition/run.py" + (" --combinations-only" if a.combinations_only else ""),
        "machine": machine(),
        "load_at_start": load,
        "seconds": time.time() - t0,
        **({"parallel_run": parallel_run} if parallel_run else {}),
    }
    lines = [
        "# Composition: one loop, every verb data-parallel, every combination defined",
        "",
        f"Command: `{data['command']}`\\",
        f"Machine: {data['machine']}; load average at start {' '.join(load)}; {data['seconds']:.0f} s.",
        "",
        "## Every verb data-parallel",
        "",
        "One update of each verb's method on fixed pre-rolled groups (5 groups of 4 episodes, tiny-xs warm start on",
        "sums, teachers tiny-xs models), on 2 CPU ranks (torchrun, gloo) against one process on the whole batch.",
        "Ranks hold uneven shares; dynamic sampling filters each share. Gradients after clipping.",
        *(
            [
                f"These rows are the last full run's (`{parallel_run['command']}` on {parallel_run['machine']}; "
                f"load average at start {' '.join(parallel_run['load_at_start'])}; {parallel_run['seconds']:.0f} s).",
            ]
            if parallel_run
            else []
        ),
        "",
        "| case | verb | max abs grad diff (DDP) | max abs grad diff (FSDP2) | largest grad | state equal |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for case, row in cases.items():
        same = all(row[s]["state_equal"] for s in ("ddp", "fsdp2"))
        lines.append(
            f"| {case} | {row['verb']} | {row['ddp']['max_abs_grad_diff']:.2e} | {row['fsdp2']['max_abs_grad_diff']:.2e} "
            f"| {row['ddp']['max_abs_grad']:.3f} | {same} |"
        )
    lines += [
        "",
        f"| verb | data-parallel equivalent (diff <= {tol:.0e}) | max abs grad diff |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {v} | {r['data_parallel_equivalent']} | {r['max_abs_grad_diff']:.2e} |" for v, r in verbs.items()]
    lines += [
        "",
        "## Combinations",
        "",
        f"{data['combinations_total']} combinations of credit x option x turns: {data['combinations_refused']} refused "
        f"when the config is read, {data['combinations_effective']} effective as documented, "
        f"{data['silent_noops']} silent no-ops.",
        "",
        "| credit | option | turns | status | detail |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {r['credit']} | {r['option']} | {r['turns']} | {r['status']} | {r['detail']} |" for r in matrix]
    lines += ["", "## Layers", "", f"Imports that run up the layers: {len(upward)}.", ""]
    lines += [f"- {u}" for u in upward]
    write_results(a.results, "composition", "\n".join(lines) + "\n", data)
    print(f"verbs: { {v: r['data_parallel_equivalent'] for v, r in verbs.items()} }; noops {data['silent_noops']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
