"""A working folder from which tinker-cookbook's `sl_loop.py` and `rl_loop.py` run offline, unchanged.

The loops load their tokenizer (`AutoTokenizer.from_pretrained(model_name)`) and their dataset
(`datasets.load_dataset("HuggingFaceH4/no_robots")`, `("openai/gsm8k", "main")`) by name; both libraries
read a folder of that relative name first. So the folder holds `MODEL_NAME/` (a link to the tokenizer the
service wrote under `state_dir/names/`) and small local datasets in the recipes' own formats: chat
messages for SL, GSM8K's `question` / `answer` (`... #### N`) for RL, both on sums of one-digit numbers.
Run a loop from this folder with `HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1` (docs/tinker.md). A loop run
in this process (`tinker_cookbook.rl.train.main`) finds the served tokenizer through `register_tokenizer`.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


def _dataset(folder: Path, name: str, config: str, columns: dict[str, list]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = folder / name
    (root / config).mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text(
        f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: train\n    path: {config}/train-*\n---\n"
    )
    pq.write_table(pa.table(columns), root / config / "train-00000-of-00001.parquet")


def prepare(folder: Path, state_dir: Path, model_name: str) -> Path:
    """Write the datasets and link `model_name`'s tokenizer folder into `folder` (created); returns it."""
    tokenizer = state_dir / "names" / model_name
    if not (tokenizer / "tokenizer_config.json").is_file():
        raise FileNotFoundError(
            f"{tokenizer} holds no tokenizer: start `tempering serve tinker` with {model_name} in its models first"
        )
    link = folder / model_name
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.exists():
        link.symlink_to(tokenizer.resolve())
    pairs = [(a, b) for a in range(1, 10) for b in range(1, 10)]
    _dataset(
        folder,
        "HuggingFaceH4/no_robots",
        "default",
        {
            "messages": [
                [
                    {"role": "user", "content": f"What is {a} plus {b}?"},
                    {"role": "assistant", "content": f"{a} plus {b} is {a + b}."},
                ]
                for a, b in pairs
            ]
        },
    )
    _dataset(
        folder,
        "openai/gsm8k",
        "main",
        {
            "question": [f"What is {a} + {b}?" for a, b in pairs],
            "answer": [f"{a} + {b} = {a + b}\n#### {a + b}" for a, b in pairs],
        },
    )
    return folder


def register_tokenizer(state_dir: Path, model_name: str) -> None:
    """Make the cookbook's `get_tokenizer(model_name)` (which `rl/train.py` calls) load the tokenizer the
    service wrote for that served name, in this process: no working folder, no download."""
    from tinker_cookbook.tokenizer_utils import register_tokenizer
    from transformers import AutoTokenizer

    folder = state_dir / "names" / model_name
    if not (folder / "tokenizer_config.json").is_file():
        raise FileNotFoundError(
            f"{folder} holds no tokenizer: start `tempering serve tinker` with {model_name} in its models first"
        )
    register_tokenizer(model_name, lambda: AutoTokenizer.from_pretrained(folder))  # type: ignore[arg-type,return-value]


OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TINKER_API_KEY": "tml-local"}
"""The environment a loop runs in against this service: no hub download; the SDK wants a key, this service reads none."""


@contextlib.contextmanager
def serving(state_dir: Path, models: dict[str, str], *settings: str, timeout: float = 120.0) -> Iterator[str]:
    """`tempering serve tinker` in a child process on a free port, until the block ends; yields its URL."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "tempering.cli",
        "serve",
        "tinker",
        f"port={port}",
        f"state_dir={state_dir}",
        f"models={json.dumps(models)}",
        *settings,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/api/v1/healthz").status_code == 200:
                    break
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError(f"`{' '.join(cmd)}` did not start:\n{proc.stdout.read()[-3000:]}")  # type: ignore[union-attr]
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_loop(
    recipe: str, folder: Path, url: str, model_name: str, *args: str, log: str | None = None, timeout: float = 1800
) -> list[dict]:
    """Run `tinker_cookbook.recipes.RECIPE` as it ships, from `folder`, against `url`; its logged metrics, one
    dict per step (`folder/LOG/metrics.jsonl`, LOG the recipe's name unless given)."""
    log_path = folder / (log or recipe)
    cmd = [
        sys.executable,
        "-m",
        f"tinker_cookbook.recipes.{recipe}",
        f"base_url={url}",
        f"model_name={model_name}",
        f"log_path={log_path}",
        "save_every=0",
        *args,
    ]
    done = subprocess.run(
        cmd, cwd=folder, env={**os.environ, **OFFLINE}, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode:
        raise RuntimeError(f"{recipe} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
