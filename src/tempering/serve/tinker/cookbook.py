"""A working folder from which tinker-cookbook's `sl_loop.py`, `rl_loop.py` and on-policy distillation recipes
run offline, unchanged.

The loops load their tokenizer (`AutoTokenizer.from_pretrained(model_name)`) and their dataset
(`datasets.load_dataset("HuggingFaceH4/no_robots")`, `("openai/gsm8k", "main")`) by name; both libraries
read a folder of that relative name first. So the folder holds `MODEL_NAME/` (a link to the tokenizer the
service wrote under `state_dir/names/`) and small local datasets in the recipes' own formats: chat
messages for SL, GSM8K's `question` / `answer` (`... #### N`) for RL, DeepMath's `question` and Tulu 3's
`messages` for distillation's prompts, all on sums of one-digit numbers.
Run a loop from this folder with `HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1` (docs/tinker.md). A loop run
in this process (`tinker_cookbook.rl.train.main`) finds the served tokenizer through `register_tokenizer`.

`warm_start` makes a tiny model for which rl_loop's reward can move: `tempering pretrain` on those sums,
rendered as rl_loop renders its prompts, answered as its grader reads answers (`\\boxed{N}`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SUMS = [(a, b) for a in range(1, 10) for b in range(1, 10)]
"""The local datasets' questions: every sum of two one-digit numbers."""
SMALL_SUMS = [(a, b) for a in range(1, 4) for b in range(1, 4)]
"""Nine sums with five answers: a task on which a tiny model warm-started in minutes answers some right and
some wrong, so that rl_loop's reward can rise within a few steps on a CPU (on `SUMS` it learns the answers'
form and their spread, not which sum is which: about 11% greedy accuracy after 40 or 120 steps)."""


def _dataset(folder: Path, name: str, config: str, columns: dict[str, list]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = folder / name
    (root / config).mkdir(parents=True, exist_ok=True)
    (root / "README.md").write_text(
        f"---\nconfigs:\n- config_name: {config}\n  data_files:\n  - split: train\n    path: {config}/train-*\n---\n"
    )
    pq.write_table(pa.table(columns), root / config / "train-00000-of-00001.parquet")


def prepare(
    folder: Path, state_dir: Path, *model_names: str, repeats: int = 1, seed: int = 0, sums: list = SUMS
) -> Path:
    """Write the datasets and link each of `model_names`' tokenizer folders into `folder` (created); returns
    it. `repeats` > 1 makes the SL and RL datasets that many passes over `sums`, each shuffled (by `seed`), so a
    loop that reads its rows in order sees every sum once per pass (and sl_loop's default batch of 128 fits);
    a `seed` other than 0 shuffles a single pass too (each seed of a run asks its own order). The distillation
    prompts are always `SUMS`."""
    for model_name in model_names:
        tokenizer = state_dir / "names" / model_name
        if not (tokenizer / "tokenizer_config.json").is_file():
            raise FileNotFoundError(
                f"{tokenizer} holds no tokenizer: start `tempering serve tinker` with {model_name} in its models first"
            )
        link = folder / model_name
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            link.symlink_to(tokenizer.resolve())
    rng = random.Random(seed)
    passes = sums if repeats == 1 and not seed else [p for _ in range(repeats) for p in rng.sample(sums, len(sums))]
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
                for a, b in passes
            ]
        },
    )
    _dataset(
        folder,
        "openai/gsm8k",
        "main",
        {
            "question": [question(a, b) for a, b in passes],
            "answer": [f"{a} + {b} = {a + b}\n#### {a + b}" for a, b in passes],
        },
    )
    # on-policy distillation's prompt sets: DeepMath's `question`, Tulu 3's chat `messages`
    _dataset(folder, "zwhe99/DeepMath-103K", "default", {"question": [question(a, b) for a, b in SUMS]})
    _dataset(
        folder,
        "allenai/tulu-3-sft-mixture",
        "default",
        {"messages": [[{"role": "user", "content": f"What is {a} plus {b}?"}] for a, b in SUMS]},
    )
    return folder


def question(a: int, b: int) -> str:
    return f"What is {a} + {b}?"


RL_LOOP_SUFFIX = " Provide a numerical answer without units, written inside \\boxed{}."
RL_LOOP_SHOT = [
    {"role": "user", "content": "How many r's are in strawberry?" + RL_LOOP_SUFFIX},
    {
        "role": "assistant",
        "content": "Let's spell the word out and number all the letters: 1) s 2) t 3) r 4) a 5) w 6) b 7) e 8) r "
        "9) r 10) y. We have r's at positions 3, 8, and 9. \\boxed{3}",
    },
]
"""The conversation rl_loop.py (tinker-cookbook 0.6.1) puts before each GSM8K question, and its question suffix."""


def rl_loop_prompt(renderer, text: str) -> list[int]:
    """The tokens rl_loop.py samples from for the GSM8K question `text`."""
    convo = [*RL_LOOP_SHOT, {"role": "user", "content": text + RL_LOOP_SUFFIX}]
    return renderer.build_generation_prompt(convo).to_ints()


WARM_START: dict[str, Any] = {
    "model": {"name": "tiny-s"},
    "rollout": {"prompts_per_step": 32, "max_new_tokens": 16},
    "optim": {"lr": 3e-3, "warmup_steps": 20},
    "run": {"steps": 40, "eval_every": 0, "progress": False, "tensorboard": False},
}
"""`tempering pretrain` settings of the warm start: 40 steps learn the answer's form and some of the sums
(about 10% greedy accuracy; on a loaded 2-core machine, 8 s a step: the prompts are rl_loop's 370 tokens)."""

SMALL_WARM_START: dict[str, Any] = {
    "rollout": {"prompts_per_step": 16},
    "optim": {"lr": 1e-2, "warmup_steps": 5},
    "run": {"steps": 60, "eval_every": 15},
}
"""The warm start on `SMALL_SUMS` (`warm_start(cache, name, SMALL_SUMS, **SMALL_WARM_START)`): 60 steps of 16
examples end at greedy accuracy 1/3 on the nine sums (12 s a step on the loaded 2-core machine)."""


def warm_start(cache: Path, model_name: str = "meta-llama/Llama-3.2-1B", sums: list = SUMS, **settings: Any) -> Path:
    """A tiny model warm-started on `sums` as rl_loop.py asks them of `model_name` (its renderer, few-shot
    prompt and question suffix), each answered ` \\boxed{N}` then end-of-sequence, to a starting accuracy
    inside (0, 1), so rl_loop's groups have advantages. Built once under `cache` (keyed by the settings, the
    rows, the training code and torch); returns the model's folder, which `tempering serve tinker` serves
    under `model_name`."""
    import shutil
    import tempfile

    import torch
    from tinker_cookbook import model_info, renderers

    from tempering.config import build
    from tempering.envs.dataset import DatasetFamily
    from tempering.methods import pretrain as pretrain_module
    from tempering.methods.pretrain import PretrainConfig, pretrain
    from tempering.models import tiny
    from tempering.models.tokenizer import char_tokenizer

    cfg = {k: {**WARM_START.get(k, {}), **settings.get(k, {})} for k in {*WARM_START, *settings}}
    if cfg["model"]["name"] not in tiny.TINY_SIZES:
        raise ValueError(f"warm_start makes a tiny model; model.name={cfg['model']['name']} is not one")
    renderer_name = model_info.get_recommended_renderer_name(model_name)
    tok = char_tokenizer()
    renderer = renderers.get_renderer(renderer_name, tok)  # type: ignore[arg-type]
    rows = []
    for a, b in sums:
        ids = rl_loop_prompt(renderer, question(a, b))
        text = tok.decode(ids)
        if tok.encode(text, add_special_tokens=False) != ids:
            raise RuntimeError(
                f"the {renderer_name} prompt does not survive decoding with the tiny tokenizer: {text!r}"
            )
        rows.append({"prompt": text, "answer": f" \\boxed{{{a + b}}}"})
    key = hashlib.sha256(json.dumps([cfg, rows, torch.__version__], sort_keys=True).encode())
    for code in (pretrain_module.__file__, tiny.__file__):  # a change to the recipe builds it again
        key.update(Path(code).read_bytes())
    done = cache / f"rl_loop_sums-{key.hexdigest()[:16]}"
    if (done / "model" / "config.json").is_file():
        return done / "model"
    family = DatasetFamily(rows, reward="exact", heldout=rows, name="rl_loop_sums")
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".rl_loop_sums.", dir=cache))
    cfg["run"] = {**cfg["run"], "out_dir": str(work / "run")}
    result = pretrain(build(PretrainConfig, cfg), family=family)
    shutil.move(work / "run" / "final", work / "model")
    (work / "model" / "warm_start.json").write_text(json.dumps({**result, "settings": cfg}, indent=1) + "\n")
    shutil.rmtree(work / "run")
    try:
        os.replace(work, done)  # atomic: a parallel build that got there first keeps its copy
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    return done / "model"


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
    recipe: str,
    folder: Path,
    url: str,
    model_name: str,
    *args: str,
    log: str | None = None,
    timeout: float = 1800,
    save_every: int | None = 0,
) -> list[dict]:
    """Run `tinker_cookbook.recipes.RECIPE` as it ships, from `folder`, against `url`; its logged metrics, one
    dict per step (`folder/LOG/metrics.jsonl`, LOG the recipe's name unless given). The datasets cache is the
    folder's own: offline, `datasets` would otherwise read another folder's copy of the same name. `save_every`:
    the recipe's own, 0 (no checkpoints but the last) unless given; None leaves the recipe's default."""
    log_path = folder / (log or recipe)
    cmd = [
        sys.executable,
        "-m",
        f"tinker_cookbook.recipes.{recipe}",
        f"base_url={url}",
        f"model_name={model_name}",
        f"log_path={log_path}",
        *([] if save_every is None else [f"save_every={save_every}"]),
        *args,
    ]
    done = subprocess.run(
        cmd,
        cwd=folder,
        env={**os.environ, **OFFLINE, "HF_DATASETS_CACHE": str(folder / ".datasets-cache")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode:
        raise RuntimeError(f"{recipe} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return [json.loads(line) for line in (log_path / "metrics.jsonl").read_text().splitlines()]
