"""`tempering sandbox ...`: what works on this machine, and proof that it contains hostile code.

tempering sandbox backends                  # the backends that work here, and what each does not contain
tempering sandbox attacks [BACKEND ...]     # the adversarial suite (exit 1 if any attack got out)
tempering sandbox attacks --path "job API"  # only the cases through these paths that judge
tempering sandbox attacks --json            # {backend: {total, contained, failed, not_run, cases}}

The suite attacks only the isolating backends (bwrap, unshare, gvisor), never the host's `subprocess`
backend; benchmarks/sandbox_verdicts.py writes its results (docs/results/sandbox.md).

Code-problem files are checked by `tempering code check`.
"""

from __future__ import annotations

from tempering.config import Parser, parse
from tempering.errors import UserError


def parser() -> Parser:
    ap = Parser(prog="tempering sandbox", description=__doc__.splitlines()[0])
    ap.command("backends", "list the backends that work here")
    att = ap.command("attacks", "run the adversarial suite")
    att.add_argument("backend", nargs="*", help="isolating backends to attack (default: every one that works here)")
    att.add_argument("--json", action="store_true", help="print {backend: {total, contained, failed, not_run, cases}}")
    att.add_argument("--path", action="append", default=[], help="a path that judges (repeat; default: every one)")
    att.add_argument("--class", dest="classes", action="append", default=[], help="a class of attack (repeat)")
    return ap


def main(argv: list[str]) -> int:
    args = parse(parser(), argv)

    from tempering.sandbox import Sandbox, backends

    if args.cmd == "backends":
        for name in ("bwrap", "unshare", "gvisor", "subprocess"):
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
    from tempering.sandbox import attacks

    if "subprocess" in args.backend:
        raise UserError(
            "the subprocess backend does not isolate: attacks there would run on this machine; "
            f"attack an isolating backend ({', '.join(attacks.ISOLATED)})."
        )
    unknown = set(args.backend) - set(Sandbox.available_backends())
    if unknown:
        raise UserError(f"backend(s) {sorted(unknown)} do not work here; working: {attacks.isolated_backends()}.")
    if bad := set(args.path) - set(attacks.PATHS):
        raise UserError(f"unknown path(s) {sorted(bad)}: choose among {', '.join(attacks.PATHS)}.")
    return attacks.main(args.backend, as_json=args.json, paths=args.path or attacks.PATHS, only=args.classes)
