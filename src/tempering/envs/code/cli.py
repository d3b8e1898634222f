"""`tempering code ...`: check code-problem files and score files of completions.

tempering code check [FILE]                          # the format; reference solutions pass their tests
tempering code score FILE --completions C.jsonl      # per-completion verdicts and pass@k

FILE is the built-in set when left out, else a local HumanEval, MBPP, LiveCodeBench or native file
(JSONL, JSON array, or gzipped). Completions are HumanEval's sample format, one JSON object per line
with `task_id` and `completion`; each completion is assembled the way the problem's benchmark does
(HumanEval: prompt + completion). pass@k uses HumanEval's unbiased estimator, for each k that every
scored problem has at least k completions for (a note names each k left out). Records that cannot
be judged are skipped with a warning naming them (see tempering.envs.code.problems).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Collection
from pathlib import Path

from tempering.config import Parser, parse
from tempering.envs.code.env import Grade, grade
from tempering.envs.code.formats import load_problems
from tempering.envs.code.problems import BUILTIN, FORMATS, CodeProblem, Skipped
from tempering.errors import UserError
from tempering.metrics import pass_at_k
from tempering.progress import progress_bar
from tempering.runlog import atomic_write_text
from tempering.sandbox import Sandbox


async def grade_all(sandbox: Sandbox, jobs: list[tuple[CodeProblem, str]], label: str, **kw) -> list[Grade]:
    """Grade (problem, answer) pairs concurrently, with a progress bar; results in the given order."""
    done: Counter[bool] = Counter()
    with progress_bar(len(jobs), label) as bar:

        async def one(problem: CodeProblem, answer: str) -> Grade:
            g = await grade(sandbox, problem, answer, **kw)
            done[g.status == "correct"] += 1
            bar.update({"correct": done[True] / done.total()})
            return g

        return list(await asyncio.gather(*(one(p, a) for p, a in jobs)))


def read_completions(path: Path, problems: dict[str, CodeProblem], skipped: Collection[str] = ()) -> list[dict]:
    """The rows of a completions file; UserError naming the line of a bad or unknown row. Rows for
    problems the loader skipped (they cannot be judged) are left out, and counted in a note."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read completions from {path}: {e}") from e
    rows, dropped = [], 0
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{n}: not valid JSON ({e.msg} at column {e.colno}).") from None
        if not isinstance(row, dict) or not isinstance(row.get("completion"), str) or "task_id" not in row:
            raise UserError(f"{path}:{n}: expected an object with 'task_id' and 'completion' (a string).")
        if str(row["task_id"]) in skipped:
            dropped += 1
            continue
        if str(row["task_id"]) not in problems:
            raise UserError(f"{path}:{n}: task_id {row['task_id']!r} is not a problem of the problem file.")
        rows.append(row)
    if dropped:
        print(f"note: {dropped} completions are for problems skipped as unjudgeable, and are not scored.")
    if not rows:
        raise UserError(f"{path} holds no completions: one JSON object per line, with task_id and completion.")
    return rows


def summarise(rows: list[dict], ks: list[int]) -> dict:
    """pass@k over problems (HumanEval's estimator) and the count of each status."""
    by_task: dict[str, list[bool]] = {}
    for row in rows:
        by_task.setdefault(str(row["task_id"]), []).append(row["passed"])
    least = min(len(v) for v in by_task.values())
    out: dict = {"problems": len(by_task), "completions": len(rows)}
    for k in ks:
        if k <= least:
            out[f"pass@{k}"] = sum(pass_at_k(len(v), sum(v), k) for v in by_task.values()) / len(by_task)
    out["statuses"] = dict(Counter(row["status"] for row in rows).most_common())
    return out


def cmd_check(args) -> int:
    skipped: list[Skipped] = []
    problems = load_problems(args.file or BUILTIN, args.format, skipped=skipped)
    formats = Counter(p.format for p in problems)
    left_out = f"; {len(skipped)} records skipped, they cannot be judged (see the warning)" if skipped else ""
    print(f"{len(problems)} problems ({', '.join(f'{n} {f}' for f, n in formats.items())}){left_out}")
    with_ref = [p for p in problems if p.solution]
    sandbox = Sandbox(backend=args.backend, concurrency=args.concurrency)
    grades = asyncio.run(grade_all(sandbox, [(p, p.solution) for p in with_ref], "references", public=True))
    bad, misleading = 0, []
    for p, g in zip(with_ref, grades):
        if g.status != "correct":
            bad += 1
            print(f"{p.id}: {g.status}\n  " + g.detail.replace("\n", "\n  "))
        public = [i + 1 for i, r in enumerate(g.public_results or []) if not r["passed"]]
        if public:
            misleading.append(f"{p.id} (public test {', '.join(map(str, public))})")
    if misleading:
        print(f"note: public tests that fail on the reference (their feedback would mislead): {', '.join(misleading)}")
    key = lambda t: (t.source, t.stdin, t.stdout)
    shown = [p.id for p in problems if {key(t) for t in p.tests} <= {key(t) for t in p.public_tests}]
    if shown:
        print(f"note: every reward test of {len(shown)} problem(s) is public, so feedback shows them all: {shown[:10]}")
    mixed = [f"{p.id} ({why})" for p in problems if (why := p.public_setup()[1])]
    if mixed:
        print(
            f"note: hidden inputs may be in the public run of {len(mixed)} problem(s): {'; '.join(mixed[:10])}; "
            "its feedback could show them"
        )
    answered = [f"{p.id} ({why})" for p in problems if p.kind == "function" and (why := p.expected_from_answer())]
    if answered:
        print(
            f"note: the answer's own objects compute the expected side of a test in {len(answered)} problem(s): "
            f"{'; '.join(answered[:10])}; an answer decides those tests itself"
        )
    print(
        f"{len(with_ref) - bad} of {len(with_ref)} reference solutions pass; "
        f"{len(problems) - len(with_ref)} problems have none."
    )
    return 1 if bad else 0


def cmd_score(args) -> int:
    skipped: list[Skipped] = []
    loaded = load_problems(args.file, args.format, args.test_timeout, args.time_budget, skipped=skipped)
    problems = {p.id: p for p in loaded}
    left_out = {s.id for s in skipped}
    path = Path(args.completions)
    rows = read_completions(path, problems, left_out)
    try:
        ks = sorted({int(k) for k in args.k.split(",")})
    except ValueError:
        raise UserError(f"--k {args.k!r}: give comma-separated positive integers, e.g. 1,10,100.") from None
    if not ks or ks[0] < 1:
        raise UserError(f"--k {args.k!r}: give comma-separated positive integers, e.g. 1,10,100.")
    sandbox = Sandbox(backend=args.backend, concurrency=args.concurrency)
    jobs = [(problems[str(row["task_id"])], row["completion"]) for row in rows]
    grades = asyncio.run(grade_all(sandbox, jobs, "completions"))
    verdicts = [
        {
            **row,
            "status": g.status,
            "passed": g.status == "correct",
            "tests_passed": g.passed,
            "tests_total": g.total,
            "detail": g.detail,
        }
        for row, g in zip(rows, grades)
    ]
    out = Path(args.out or f"{path}_results.jsonl")
    atomic_write_text(out, "".join(json.dumps(v) + "\n" for v in verdicts))
    summary = summarise(verdicts, ks)
    missing = len(problems) - summary["problems"]
    for key, value in summary.items():
        print(f"{key:<12} {value:.4f}" if isinstance(value, float) else f"{key:<12} {value}")
    unreported = [k for k in ks if f"pass@{k}" not in summary]
    if unreported:
        least = min(Counter(str(v["task_id"]) for v in verdicts).values())
        print(
            f"note: pass@{', pass@'.join(map(str, unreported))} not reported: some problem has only {least} "
            "completion(s), and pass@k needs at least k for every problem."
        )
    if missing:
        print(f"note: {missing} of the file's {len(problems)} problems have no completion and are not scored.")
    print(f"verdicts: {out}")
    if args.json:
        atomic_write_text(Path(args.json), json.dumps(summary, indent=2) + "\n")
    return 0


def parser() -> Parser:
    ap = Parser(prog="tempering code", description=__doc__.splitlines()[0])
    check = ap.command("check", "check a problem file: its format, and that reference solutions pass")
    check.add_argument("file", nargs="?", default="", help="problem file (default: the built-in set)")
    score = ap.command("score", "score a file of completions: verdicts and pass@k")
    score.add_argument("file", help="problem file")
    score.add_argument("--completions", required=True, help="JSONL of {task_id, completion}")
    score.add_argument("--out", help="verdicts JSONL (default: <completions>_results.jsonl)")
    score.add_argument("--k", default="1,10,100", help="pass@k to report (default 1,10,100)")
    score.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    score.add_argument("--test-timeout", type=float, help="seconds per test (default: each problem's own)")
    score.add_argument("--time-budget", type=float, help="seconds per answer, all tests (default: each problem's own)")
    for p in (check, score):
        p.add_argument("--format", default="auto", choices=FORMATS)
        p.add_argument("--backend", default="auto", help="sandbox backend (default: the most isolating that works)")
        p.add_argument("--concurrency", type=int, help="answers graded at once (default: CPU cores)")
    check.set_defaults(fn=cmd_check)
    score.set_defaults(fn=cmd_score)
    return ap


def main(argv: list[str]) -> int:
    args = parse(parser(), argv)
    return int(args.fn(args) or 0)
