"""The run folder: resolved config, metrics (JSONL + TensorBoard), sample rollouts, plots."""

from __future__ import annotations

import fcntl
import fnmatch
import json
import math
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import yaml

from tempering.errors import UserError


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


RUN_FILES = frozenset(
    {
        "config.yaml",
        "metrics.jsonl",
        "samples.jsonl",
        "curves.png",
        "view.html",
        "wandb_id",
        "trackio_run",
        "report.json",
        "stage.json",
        "pass_rates.json",
        "coverage.json",
        "coverage.md",
        "summary.json",
        "result.json",
    }
)
"""The files a run (or a pipeline verb) writes at the top of its folder."""
RUN_DIRS = frozenset({"tb", "checkpoints", "final", "model", "wandb", "vllm_init"})
"""The folders it writes there; a pipeline's stages are run folders of their own inside it."""


def _is_runs(entry: Path) -> bool:
    if entry.is_symlink():
        return False
    name = entry.name
    if name.startswith(".") and ".tmp" in name:  # an atomic write cut short
        return True
    if entry.is_file():
        return name in RUN_FILES
    if entry.is_dir():
        if name in RUN_DIRS:
            return True
        return ((entry / "config.yaml").is_file() or (entry / "stage.json").is_file()) and not foreign_entries(entry)
    return False


def foreign_entries(folder: Path) -> list[Path]:
    """What a folder holds that no run writes (a user's own files), sorted."""
    return sorted(e for e in Path(folder).iterdir() if not _is_runs(e))


def _in_use(config: Path) -> bool:
    """A live run holds its config.yaml locked (`RunLog`)."""
    with config.open() as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def failed_start(out: Path) -> bool:
    """The folder holds only what a run that stopped before training wrote (its config, an evaluation at
    step 0, TensorBoard's first files): no checkpoint, no finished stage, no exported model, no metrics of a
    trained step, and no run alive in it."""
    everything = list(out.rglob("*"))
    if any(
        p.name == "stage.json" or p.name in ("final", "model") or p.parent.name == "checkpoints" for p in everything
    ):
        return False
    for p in everything:
        if p.name == "metrics.jsonl" and p.is_file():
            for ln in p.read_text(errors="replace").splitlines():
                try:
                    if json.loads(ln).get("step", 0) > 0:
                        return False
                except (json.JSONDecodeError, AttributeError):
                    return False
        if p.name == "config.yaml" and p.is_file() and _in_use(p):
            return False
    return True


def prepare_run_dir(out: Path, resume: bool, overwrite: bool) -> None:
    """A new run never mixes with anything: an empty or new folder is used; a folder that holds a run is
    refused unless `overwrite`, or it holds only a failed start (`failed_start`), and then what the run
    wrote is removed and nothing else (a folder that also holds other files is refused, naming one); a
    folder of other files is refused."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"run.out_dir={out} is a file; give a folder for the run")
    if resume or not out.is_dir() or not any(out.iterdir()):
        return
    foreign = foreign_entries(out)
    entries = list(out.iterdir())
    if not (out / "config.yaml").is_file() and len(foreign) == len(entries):
        raise UserError(
            f"run.out_dir={out} is not empty and holds no run ({foreign[0].name} is there); a run writes into an "
            "empty or new folder: choose another run.out_dir"
        )
    if not overwrite and not failed_start(out):
        # a run with a checkpoint, or a staged verb with a finished or checkpointed stage, can be continued
        started = any((out / "checkpoints").glob("step_*")) or any(
            (e / "stage.json").is_file() or any((e / "checkpoints").glob("step_*")) for e in entries
        )
        how = f"continue it with --resume {out}, replace it" if started else "replace it"
        raise UserError(f"run.out_dir={out} already holds a run; {how} with --overwrite, or choose another run.out_dir")
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UserError(
            f"{'--overwrite' if overwrite else 'a new run over a failed start'} removes only what a run wrote, and "
            f"run.out_dir={out} also holds {foreign[0].name}{more}, "
            "which no run writes: move it out of the folder, or choose another run.out_dir"
        )
    for e in entries:
        if e.is_dir() and not e.is_symlink():
            shutil.rmtree(e)
        else:
            e.unlink()


class RunLog:
    """Writes one run folder. Metrics of steps after `resume_step` are dropped when resuming."""

    def __init__(
        self,
        out_dir: str | Path,
        config: dict[str, Any],
        resume_step: int | None = None,
        tensorboard: bool = True,
        wandb: str | None = None,
        trackio: str | None = None,
        title: str = "",
        plots: tuple[str, ...] | list[str] = (),
    ):
        self.dir = Path(out_dir)
        self.title, self.plots = title, list(plots)
        """What `plot()` draws: its title and metric keys (shell-style patterns allowed, e.g. `reward/*`)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.samples_path = self.dir / "samples.jsonl"
        # a resume rewrites it too: what the continued run uses (e.g. a longer run.steps) is what the next reads
        atomic_write_text(self.dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
        self._lock = (self.dir / "config.yaml").open()  # held while the run lives: `failed_start` reads it
        fcntl.flock(self._lock, fcntl.LOCK_SH)
        if resume_step is None:
            for p in (self.metrics_path, self.samples_path):
                p.unlink(missing_ok=True)
        else:
            for p in (self.metrics_path, self.samples_path):
                self._truncate(p, resume_step)
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(
                    str(self.dir / "tb"), purge_step=None if resume_step is None else resume_step + 1
                )
            except ImportError:
                self.tb = None
        self.wandb = _wandb_run(wandb, self.dir, config, resume_step) if wandb else None
        self.trackio = _trackio_run(trackio, self.dir, config, resume_step) if trackio else None

    @staticmethod
    def _truncate(path: Path, step: int) -> None:
        """Keep the rows up to `step`; a last line cut short by a kill is dropped."""
        if not path.exists():
            return
        text = path.read_text()
        lines = text.splitlines()
        if lines and not text.endswith("\n"):
            lines = lines[:-1]
        keep = [ln for ln in lines if ln.strip() and json.loads(ln).get("step", 0) <= step]
        atomic_write_text(path, "".join(ln + "\n" for ln in keep))

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        """One JSON line (a NaN or inf becomes null, so the file stays valid JSON) and TensorBoard scalars."""
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row, allow_nan=False) + "\n")
        if self.tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
        scalars = {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
        if self.wandb is not None:
            self.wandb.log(scalars, step=step)
        if self.trackio is not None:
            self.trackio.log(scalars, step=step)

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """samples.jsonl, and a `samples` table in W&B and trackio (one row per turn of each episode)."""
        with self.samples_path.open("a") as f:
            for r in rows:
                f.write(json.dumps({"step": step, **r}) + "\n")
        if (self.wandb is None and self.trackio is None) or not rows:
            return
        table = [
            [
                step,
                r.get("task", ""),
                str(r.get("prompt", "")),
                t.get("text", ""),
                t.get("score"),
                t.get("status", ""),
                r.get("reward"),
            ]
            for r in rows
            for t in r.get("turns", [])
        ]
        if self.wandb is not None:
            import wandb

            self.wandb.log({"samples": wandb.Table(columns=list(SAMPLE_COLUMNS), data=table)}, step=step)
        if self.trackio is not None:
            import trackio

            self.trackio.log({"samples": trackio.Table(columns=list(SAMPLE_COLUMNS), data=table)}, step=step)

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(ln) for ln in self.metrics_path.read_text().splitlines() if ln.strip()]

    def plot(self, keys: list[str] | None = None, name: str = "curves.png") -> Path | None:
        """Redraw the run's curves (`plot_curves`) as a PNG in the run folder; `keys` default to the run's."""
        return plot_curves(self.read_metrics(), keys or self.plots, self.dir / name, self.title)

    def close(self) -> None:
        self._lock.close()
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()
        if self.trackio is not None:
            self.trackio.finish()


SAMPLE_COLUMNS = ("step", "task", "prompt", "answer", "score", "status", "reward")
"""The columns of the samples table W&B and trackio get (samples.jsonl has every field)."""


def _trackio_run(project: str, run_dir: Path, config: dict[str, Any], resume_step: int | None):
    """A trackio run (local-first: TRACKIO_DIR, by default ~/.cache/huggingface/trackio; `trackio show`
    opens its dashboard) named after the run folder; a resumed run continues the same one (its name is kept
    in the folder)."""
    try:
        import trackio
    except ImportError as e:
        raise UserError(
            f"run.trackio={project} needs trackio: `pip install 'tempering[trackio]' && pip install --no-deps "
            "trackio` (or leave run.trackio unset)"
        ) from e
    name_file = run_dir / "trackio_run"
    if resume_step is not None and name_file.is_file():
        name = name_file.read_text().strip()
    else:
        name = f"{run_dir.name}-{secrets.token_hex(3)}"
        atomic_write_text(name_file, name + "\n")
    return trackio.init(
        project=project, name=name, config=config, resume="allow", embed=False, auto_log_cpu=False, auto_log_gpu=False
    )


def _wandb_run(project: str, run_dir: Path, config: dict[str, Any], resume_step: int | None):
    """A Weights & Biases run named after the run folder; a resumed run continues the same one (its id
    is kept in the folder). WANDB_MODE=offline works without an account."""
    try:
        import wandb
    except ImportError as e:
        raise UserError(f"run.wandb={project} needs `pip install 'tempering[wandb]'` (or leave run.wandb unset)") from e
    id_file = run_dir / "wandb_id"
    if resume_step is not None and id_file.is_file():
        run_id = id_file.read_text().strip()
    else:
        run_id = secrets.token_hex(4)
        atomic_write_text(id_file, run_id + "\n")
    return wandb.init(
        project=project, name=run_dir.name, id=run_id, resume="allow", dir=str(run_dir), config=config, reinit=True
    )


def _numeric(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def panels(rows: list[dict[str, Any]], keys: list[str]) -> list[str]:
    """The panels worth drawing: each key (or every key a `*` pattern matches, in order of first
    appearance) that was logged, less those whose value never changed; the reward and evaluation
    panels are kept even when flat (no progress is news)."""
    logged = list(dict.fromkeys(k for r in rows for k in r if k != "step"))
    out: list[str] = []
    for key in keys:
        for k in fnmatch.filter(logged, key) if any(c in key for c in "*?[") else [key]:
            values = {r[k] for r in rows if _numeric(r.get(k))}
            if not values or k in out:
                continue
            n = sum(_numeric(r.get(k)) for r in rows)
            if n > 1 and len(values) == 1 and not (k == "reward" or k.startswith("eval/")):
                continue
            out.append(k)
    return out


def series(rows: list[dict[str, Any]], key: str) -> dict[int | None, list[tuple[int, float]]]:
    """A metric's (step, value) points, one series per evaluation size (`eval/n`; None for metrics of
    steps), smallest first."""
    out: dict[int | None, list[tuple[int, float]]] = {}
    for r in rows:
        if _numeric(r.get(key)):
            n = r.get("eval/n")
            out.setdefault(int(n) if n is not None else None, []).append((r["step"], r[key]))
    return dict(sorted(out.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))


def ema(ys: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average, debiased so the first points are not pulled
    towards zero (weight 0: the values themselves)."""
    out, last, norm = [], 0.0, 0.0
    for y in ys:
        last, norm = last * weight + (1 - weight) * y, norm * weight + (1 - weight)
        out.append(last / norm if norm else y)
    return out


def plot_curves(
    rows: list[dict[str, Any]], keys: list[str], out: Path, title: str = "", smooth: float = 0.0
) -> Path | None:
    """One panel per metric worth drawing (`panels`), written atomically as a PNG. Evaluations carry
    their number of prompts (`eval/n`): each size is its own series, so a periodic check on a few
    prompts is never joined to the full held-out evaluations, which are markers without a line.
    `smooth` > 0: per-step curves drawn faint, their `ema` with that weight over them."""
    keys = panels(rows, keys)
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(keys))
    nrows = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows + (0.4 if title else 0)), squeeze=False)
    for ax, k in zip(axes.flat, keys):
        lines = series(rows, k)
        for i, (n, pts) in enumerate(lines.items()):
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            # the largest set, the full held-out evaluations (often only the start and the end): markers only,
            # since a line between two evaluations hundreds of steps apart reads as a trend
            last = i == len(lines) - 1
            style: dict[str, str | None] = {"marker": "o" if last else "x", "linestyle": "none" if last else ":"}
            if not k.startswith("eval/"):
                style = {"marker": "." if len(xs) < 30 else None, "linestyle": "-"}
                if smooth:
                    raw = ax.plot(xs, ys, alpha=0.25, **style)[0]
                    ax.plot(xs, ema(ys, smooth), color=raw.get_color(), label=f"EMA {smooth:g}")
                    continue
            ax.plot(xs, ys, label=f"{n} prompts" if n is not None else None, **style)
        if len(lines) > 1 or (smooth and not k.startswith("eval/")):
            ax.legend(fontsize=7)
        ax.set_title(k)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(keys) :]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, out)
    return out


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
