"""Writes tests/envs/data/verl/ with verl's own code: GSM8K rows through the row-building function of
verl's `examples/data_preprocess/gsm8k.py` (the `make_map_fn` of its `__main__` block, run on local
rows: no hub download), saved as verl saves them (`datasets.Dataset.map(...).to_parquet`), and the same
rows as JSONL; plus verl's flattened trainer config and a GRPO example script, for `--from-verl`.

    python benchmarks/verl_fixtures.py PATH_TO_VERL_CHECKOUT

The checkout's commit is written into tests/envs/data/verl/SOURCE.md (what each file is, its licence).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests" / "envs" / "data" / "verl"

RAW = [
    # the first rows of GSM8K's train split (openai/gsm8k, MIT), as {question, answer}
    {
        "question": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips "
        "altogether in April and May.\n#### 72",
    },
    {
        "question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
        "How much did she earn?",
        "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = "
        "$<<0.2*50=10>>10.\n#### 10",
    },
    {
        "question": "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she "
        "needs. Her parents decided to give her $15 for that purpose, and her grandparents twice as much as her "
        "parents. How much more money does Betty need to buy the wallet?",
        "answer": "In the beginning, Betty has only 100 / 2 = $<<100/2=50>>50.\nBetty's grandparents gave her 15 * "
        "2 = $<<15*2=30>>30.\nThis means, Betty needs 100 - 50 - 30 - 15 = $<<100-50-30-15=5>>5 more.\n#### 5",
    },
    {
        "question": "James writes a 3-page letter to 2 different friends twice a week.  How many pages does he write "
        "a year?",
        "answer": "He writes each friend 3*2=<<3*2=6>>6 pages a week\nSo he writes 6*2=<<6*2=12>>12 pages every "
        "week\nThat means he writes 12*52=<<12*52=624>>624 pages a year\n#### 624",
    },
    # ours, in GSM8K's form: an answer with a thousands separator, which verl's extract_solution removes
    {
        "question": "A farm sells 300 eggs a day. How many eggs does it sell in 4 days?",
        "answer": "It sells 300*4=<<300*4=1200>>1200 eggs.\n#### 1,200",
    },
]


def verl_row_function(source: str):
    """`make_map_fn` and `extract_solution` of verl's gsm8k.py, defined as the script defines them."""
    tree = ast.parse(source)
    wanted: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "extract_solution"]
    main = next(n for n in tree.body if isinstance(n, ast.If))  # if __name__ == "__main__":
    for n in main.body:
        if isinstance(n, ast.FunctionDef) and n.name == "make_map_fn":
            wanted.append(n)
        if isinstance(n, ast.Assign) and any(
            getattr(t, "id", "") in ("data_source", "instruction_following") for t in n.targets
        ):
            wanted.append(n)
    scope: dict = {"re": re}
    exec(compile(ast.Module(body=wanted, type_ignores=[]), "verl/examples/data_preprocess/gsm8k.py", "exec"), scope)
    return scope["make_map_fn"]


def main(verl: str) -> None:
    import datasets

    git = ["git", "-C", verl]
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    def show(path: str) -> str:
        return subprocess.run([*git, "show", f"HEAD:{path}"], capture_output=True, text=True, check=True).stdout

    make_map_fn = verl_row_function(show("examples/data_preprocess/gsm8k.py"))
    OUT.mkdir(parents=True, exist_ok=True)
    train = datasets.Dataset.from_list(RAW).map(function=make_map_fn("train"), with_indices=True)
    train.to_parquet(str(OUT / "gsm8k_train.parquet"))
    with (OUT / "gsm8k_train.jsonl").open("w") as f:
        for row in train:
            f.write(json.dumps(row) + "\n")
    (OUT / "ppo_trainer.yaml").write_text(show("verl/trainer/config/_generated_ppo_trainer.yaml"))
    (OUT / "run_qwen2-7b.sh").write_text(show("examples/grpo_trainer/run_qwen2-7b.sh"))
    (OUT / "SOURCE.md").write_text(
        f"# verl fixtures\n\nWritten by `python benchmarks/verl_fixtures.py` from volcengine/verl at {commit} "
        "(Apache-2.0):\n\n"
        "- `gsm8k_train.parquet`, `gsm8k_train.jsonl`: five GSM8K-format rows (four from openai/gsm8k's train "
        "split, MIT; one of ours with a thousands separator) through the row-building function of verl's "
        "`examples/data_preprocess/gsm8k.py`, saved with `Dataset.to_parquet` as that script saves them.\n"
        "- `ppo_trainer.yaml`: verl's `verl/trainer/config/_generated_ppo_trainer.yaml` (the flattened PPO "
        "trainer config), unchanged.\n"
        "- `run_qwen2-7b.sh`: verl's `examples/grpo_trainer/run_qwen2-7b.sh` (GRPO overrides), unchanged.\n"
    )
    print(f"wrote {OUT} from verl {commit}")


if __name__ == "__main__":
    main(sys.argv[1])
