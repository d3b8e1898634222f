"""`tempering gui ...`: make trajectory datasets of the offline GUI apps, look at tasks, check files.

tempering gui generate --out data/gui.jsonl --n 200 --seed 0 --agent oracle
tempering gui show --kind files --difficulty 1
tempering gui stats data/gui.jsonl
"""

from __future__ import annotations

import json

from tempering.config import Parser, parse
from tempering.envs.gui.agents import make_agent
from tempering.envs.gui.apps import APPS
from tempering.envs.gui.dataset import generate, read_dataset, write_jsonl
from tempering.envs.gui.env import GuiFamily
from tempering.envs.gui.metrics import summarize
from tempering.errors import UserError


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in APPS]
    if bad or not kinds:
        raise UserError(f"--kinds: unknown app kinds {bad}; choose from {','.join(APPS)}")
    return kinds


def parser() -> Parser:
    p = Parser(prog="tempering gui", description="Offline GUI apps with multi-solution annotations.")
    g = p.command("generate", "roll out a scripted agent and write trajectories (JSONL)")
    g.add_argument("--out", required=True, help="output JSONL file (written atomically)")
    g.add_argument("--n", type=int, default=100, help="number of tasks (episodes)")
    g.add_argument("--seed", type=int, default=0, help="seed of the tasks and of the agent")
    g.add_argument("--split", choices=["train", "heldout"], default="train")
    g.add_argument("--difficulty", type=int, default=0, help="0 = smallest apps; each level grows them")
    g.add_argument("--kinds", default=",".join(APPS), help=f"comma-separated app kinds ({','.join(APPS)})")
    g.add_argument("--agent", choices=["oracle", "noisy"], default="oracle")
    g.add_argument("--noise", type=float, default=0.2, help="wrong-action chance of the noisy agent")
    g.add_argument("--boxes", action="store_true", help="render bounding boxes in prompts")
    s = p.command("show", "print one task's first screen, plan and valid actions")
    s.add_argument("--kind", choices=list(APPS), default="form")
    s.add_argument("--difficulty", type=int, default=0)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--boxes", action="store_true")
    t = p.command("stats", "check a trajectory file and print its metrics")
    t.add_argument("file")
    return p


def main(argv: list[str]) -> int:
    args = parse(parser(), argv)
    if args.cmd == "generate":
        if args.n < 1:
            raise UserError(f"--n must be at least 1, got {args.n}")
        family = GuiFamily(kinds=_kinds(args.kinds), difficulty=args.difficulty, boxes=args.boxes)
        records = generate(family, make_agent(args.agent, args.seed, args.noise), args.n, args.split, args.seed)
        write_jsonl(args.out, records)
        print(json.dumps({"out": args.out, **summarize(records)}))
    elif args.cmd == "show":
        family = GuiFamily(kinds=(args.kind,), difficulty=args.difficulty, boxes=args.boxes)
        env = family.make_env(family.tasks("train", 1, args.seed)[0])
        view = env.view()
        print(view.prompt)
        print("\nplan:", "; ".join(view.plan))
        print("valid actions:", " | ".join(str(a) for a in view.valid))
    else:
        print(json.dumps(summarize(read_dataset(args.file))))
    return 0
