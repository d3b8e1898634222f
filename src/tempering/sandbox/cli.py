"""`tempering sandbox ...`: what works on this machine, and proof that it contains hostile code.

tempering sandbox backends                  # the backends that work here, and what each does not contain
tempering sandbox attacks [BACKEND ...]     # the adversarial suite (exit 1 if any attack got out)
tempering sandbox attacks --json            # the same as {backend: {total, contained, failed}}
tempering sandbox problems [FILE.jsonl]     # check a code-problem file: format, reference solutions
"""

from __future__ import annotations

import argparse
import asyncio

from tempering.errors import UserError


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tempering sandbox", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("backends", help="list the backends that work here")
    att = sub.add_parser("attacks", help="run the adversarial suite")
    att.add_argument("backend", nargs="*", help="backends to attack (default: every one that works here)")
    att.add_argument("--json", action="store_true", help="print {backend: {total, contained, failed}} as JSON")
    prob = sub.add_parser("problems", help="check a code-problem JSONL file against its reference solutions")
    prob.add_argument("file", nargs="?", default="", help="JSONL file (default: the built-in set)")
    prob.add_argument("--backend", default="auto")
    args = ap.parse_args(argv)

    from tempering.sandbox import Sandbox

    if args.what == "backends":
        return _print_backends()
    if args.what == "attacks":
        from tempering.sandbox import attacks

        unknown = set(args.backend) - set(Sandbox.available_backends())
        if unknown:
            raise UserError(f"backend(s) {sorted(unknown)} do not work here; working: {Sandbox.available_backends()}.")
        # --json: {backend: {total, contained, ...}}, e.g. for a reliability report
        return attacks.main(args.backend, as_json=args.json)
    from tempering.envs.code import grade, load_problems
    from tempering.envs.code.problems import BUILTIN

    problems = load_problems(args.file or BUILTIN)
    missing = [p.id for p in problems if not p.solution]
    sb = Sandbox(backend=args.backend)

    async def check():
        return await asyncio.gather(*[grade(sb, p, p.solution) for p in problems if p.solution])

    bad = [
        (p.id, g.status, g.feedback)
        for p, g in zip([p for p in problems if p.solution], asyncio.run(check()))
        if g.status != "correct"
    ]
    for pid, status, feedback in bad:
        print(f"{pid}: {status}\n  " + feedback.replace("\n", "\n  "))
    print(
        f"{len(problems)} problems; {len(problems) - len(missing) - len(bad)} reference solutions pass, "
        f"{len(bad)} fail, {len(missing)} have none."
    )
    return 1 if bad else 0


def _print_backends() -> int:
    from tempering.sandbox import Sandbox, backends

    for name in ("bwrap", "unshare", "subprocess"):
        why = backends.probe(name)
        if why:
            print(f"{name:<11} unavailable: {why}")
            continue
        gaps = Sandbox(backend=name).not_contained
        head = "no isolation; it does NOT contain:" if name == "subprocess" else "does NOT contain here:"
        print(f"{name:<11} works" + (f"; {head}" if gaps else ""))
        for gap in gaps:
            print(f"{'':<13}- {gap}")
    return 0
