"""`tempering <verb> ...`: each verb lives in its own module with a `main(argv) -> int`.

Verbs are imported lazily so that `tempering --help` is instant and one verb's optional extras never
break another verb.
"""

from __future__ import annotations

import difflib
import importlib
import sys

from tempering.errors import UserError
from tempering.recipes.verbs import VERBS


def _usage() -> str:
    width = max((len(v) for v in VERBS), default=8)
    rows = "\n".join(f"  {v:<{width}}  {spec.help}" for v, spec in VERBS.items())
    return f"usage: tempering <command> [args]\n\ncommands:\n{rows}\n\n`tempering <command> --help` for one."


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        from tempering import __version__

        print(__version__)
        return 0
    verb, rest = argv[0], argv[1:]
    if verb not in VERBS:
        near = difflib.get_close_matches(verb, list(VERBS), n=1)
        hint = f" Did you mean {near[0]!r}?" if near else ""
        print(f"tempering: unknown command {verb!r}.{hint}\n\n{_usage()}", file=sys.stderr)
        return 2
    spec = VERBS[verb]
    try:
        if spec.run is not None:  # a config verb: its arguments are parsed before its module is imported
            from tempering.recipes.common import cli_main

            return cli_main(rest, verb)
        return int(importlib.import_module(spec.module).main(rest) or 0)
    except UserError as e:
        print(f"tempering {verb}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tempering {verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
