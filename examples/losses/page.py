"""docs/results/losses.{json,md}: the parity script (benchmarks/losses_parity.py) and the learning curves
(examples/losses/curves.py) each write their part of the JSON; the page is rendered from the whole JSON."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PARTS = {"parity": ("parity", "rollout_correction_parity"), "curves": ("curves", "curve_claims", "curve_setup")}


def update(results: Path, part: str, values: dict[str, Any], command: str, machine: str) -> None:
    """Replace `part`'s keys (PARTS) of losses.json, its command and machine, and render losses.md."""
    from tempering.runlog import atomic_write_text

    path = results / "losses.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.is_file() else {}
    for key in PARTS[part]:
        data[key] = values[key]
    data.setdefault("command", {})[part] = command
    data.setdefault("machine", {})[part] = machine
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")
    atomic_write_text(results / "losses.md", render(data))


def render(data: dict[str, Any]) -> str:
    from tempering.experiments import RULE, claims_table

    out = ["# Policy losses: parity with verl and TRL, and learning curves", ""]
    if "parity" in data:
        out += [
            "## Parity",
            "",
            f"Command: `{data['command']['parity']}`  ",
            f"Machine: {data['machine']['parity']}",
            "",
            "Each loss and estimator against the anchor's own function, called in a separate environment on fixed "
            "random inputs (ragged masks, single-token rows, groups with equal rewards, extreme ratios); the largest "
            "absolute difference over the cases, of the loss and of its gradient (losses) or of the advantages "
            "(estimators). docs/losses.md says where a definition differs by design.",
            "",
            "| ours | anchor | cases | max abs diff |",
            "| --- | --- | --- | --- |",
        ]
        for name, r in data["parity"].items():
            out.append(f"| {name} | {r['anchor']} | {r['cases']} | {r['max_abs_diff']:.2e} |")
        notes = [f"- {name}: {r['by_design']}" for name, r in data["parity"].items() if "by_design" in r]
        if notes:
            out += ["", "Above 1e-6, by design:", "", *notes]
        out += [
            "",
            "### Rollout correction",
            "",
            "| mode | anchor | cases | max abs diff |",
            "| --- | --- | --- | --- |",
        ]
        for name, r in data["rollout_correction_parity"].items():
            out.append(f"| {name} | {r['anchor']} | {r['cases']} | {r['max_abs_diff']:.2e} |")
        out.append("")
    if "curves" in data:
        setup = data["curve_setup"]
        out += [
            "## Learning curves on SmolLM2-135M-Instruct sums",
            "",
            f"Command: `{data['command']['curves']}`  ",
            f"Machine: {data['machine']['curves']}",
            "",
            f"The real quickstart's GRPO stage (sums of 1..30 asked in words, {setup['rollouts_per_run']} rollouts per "
            "run: 20 steps x 8 prompts x 8 samples, lr 1e-5), one loss per arm; greedy pass@1 on the 100 held-out "
            f"prompts after training. Seeds asked for: {setup['seeds']}; a loss with fewer finished seeds is "
            "still running (the script resumes).",
            "",
            "| loss | keys | pass@1 per seed | mean | 95% t-interval |",
            "| --- | --- | --- | --- | --- |",
        ]
        if not data["curves"]:
            out.append("| (no run has finished yet: run the command again, it resumes) | | | | |")
        for name, r in data["curves"].items():
            keys = " ".join(f"{k}={v}" for k, v in r["loss"].items())
            seeds = ", ".join(f"{s}: {v:.2f}" for s, v in r["per_seed"].items())
            ci = "-" if r["ci95"] is None else f"[{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]"
            out.append(f"| {name} | `{keys}` | {seeds} | {r['mean']:.3f} | {ci} |")
        if data["curve_claims"]:
            out += ["", "Each loss against GRPO (higher pass@1 is better):", "", *claims_table(data["curve_claims"])]
        out += ["", RULE, ""]
    return "\n".join(out)
