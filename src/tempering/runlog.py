"""The run folder: resolved config, metrics (JSONL + TensorBoard), sample rollouts, plots."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunLog:
    """Writes one run folder. Metrics of steps after `resume_step` are dropped when resuming."""

    def __init__(
        self, out_dir: str | Path, config: dict[str, Any], resume_step: int | None = None, tensorboard: bool = True
    ):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.samples_path = self.dir / "samples.jsonl"
        if resume_step is None:
            atomic_write_text(self.dir / "config.yaml", yaml.safe_dump(config, sort_keys=False))
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

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        with self.samples_path.open("a") as f:
            for r in rows:
                f.write(json.dumps({"step": step, **r}) + "\n")

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(ln) for ln in self.metrics_path.read_text().splitlines() if ln.strip()]

    def plot(self, keys: list[str], name: str = "curves.png") -> Path | None:
        """One panel per metric key that was logged; saved as PNG in the run folder."""
        rows = self.read_metrics()
        keys = [k for k in keys if any(k in r for r in rows)]
        if not keys:
            return None
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        cols = min(3, len(keys))
        nrows = math.ceil(len(keys) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.0 * nrows), squeeze=False)
        for ax, k in zip(axes.flat, keys):
            pts = [(r["step"], r[k]) for r in rows if isinstance(r.get(k), (int, float))]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="." if len(pts) < 30 else None)
            ax.set_title(k)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        for ax in list(axes.flat)[len(keys) :]:
            ax.axis("off")
        fig.tight_layout()
        out = self.dir / name
        tmp = out.with_name(f".{out.name}.tmp.png")
        fig.savefig(tmp, dpi=100)
        plt.close(fig)
        os.replace(tmp, out)
        return out

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()


def _plain(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
