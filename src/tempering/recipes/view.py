"""`tempering view RUN`: one self-contained HTML page of a run, to open in any browser (no server).

The page holds the run's curves (its curves.png, or drawn anew from metrics.jsonl), its evaluations,
and every logged sample (samples.jsonl): the prompt, each turn's answer, feedback, score, status and
advantage, filterable by step, status and score. Model-written text is shown as text, never as HTML.
`--serve` also serves the page on localhost.
"""

from __future__ import annotations

import argparse
import base64
import json
from pathlib import Path
from typing import Any

import yaml

from tempering.errors import UserError
from tempering.runlog import atomic_write_text

PLOTS = ("reward", "reward/*", "eval/pass@*", "success", "entropy", "response_len", "frac_zero_std_groups", "grad_norm")
"""Panels drawn when the run has no curves.png yet."""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{n} is not valid JSON ({e.msg}); is another process writing it?") from e
    return rows


def _curves(run: Path, metrics: list[dict[str, Any]], title: str, smooth: float = 0.0) -> str | None:
    """The curves as a PNG data URL: the run's own, or drawn anew (none yet, or smoothed)."""
    png = run / "curves.png"
    if (smooth or not png.is_file()) and metrics:
        import tempfile

        from tempering.runlog import plot_curves

        with tempfile.TemporaryDirectory() as tmp:
            out = plot_curves(metrics, list(PLOTS), Path(tmp) / "curves.png", title, smooth)
            return None if out is None else "data:image/png;base64," + base64.b64encode(out.read_bytes()).decode()
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode() if png.is_file() else None


def page_data(run: Path, smooth: float = 0.0) -> dict[str, Any]:
    """Everything the page shows, as one JSON-able dict."""
    if not (run / "config.yaml").is_file():
        raise UserError(f"{run} is not a run folder (no config.yaml); give the folder a run wrote")
    cfg = yaml.safe_load((run / "config.yaml").read_text()) or {}
    metrics = _jsonl(run / "metrics.jsonl")
    samples = _jsonl(run / "samples.jsonl")
    model = (cfg.get("model") or {}).get("name", "?")
    task = (cfg.get("task") or {}).get("family", "?")
    title = f"{run.name} · {model} · {task}"
    evals = [
        {k.removeprefix("eval/"): v for k, v in r.items() if k == "step" or k.startswith("eval/")} for r in metrics
    ]
    return {
        "title": title,
        "config": cfg,
        "curves": _curves(run, metrics, title, smooth),
        "evals": [e for e in evals if len(e) > 1],
        "steps": max((r["step"] for r in metrics), default=0),
        "samples": samples,
    }


TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222;max-width:1300px}
h1{font-size:1.3em} h2{font-size:1.1em;margin-top:1.5em}
img{max-width:100%;border:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em} td,th{border:1px solid #ddd;padding:2px 8px;text-align:right}
#filters{position:sticky;top:0;background:#fff;padding:.5em 0;border-bottom:1px solid #ddd}
#filters label{margin-right:1em}
.sample{border:1px solid #ccc;border-radius:6px;margin:.8em 0;padding:.5em .8em}
.sample.ok{border-left:6px solid #3a3} .sample.fail{border-left:6px solid #c33}
.head{font-weight:600} .turn{margin:.4em 0 .4em 1em;padding-left:.6em;border-left:2px solid #ddd}
.meta{color:#555;font-size:.85em} .pos{color:#080} .neg{color:#b00}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f6;padding:.4em;margin:.2em 0}
details summary{cursor:pointer;color:#555}
</style></head><body>
<h1 id="title"></h1>
<details><summary>config</summary><pre id="config"></pre></details>
<h2>Curves</h2><div id="curves"></div>
<h2>Evaluations</h2><div id="evals"></div>
<h2>Samples</h2>
<div id="filters">
<label>step <select id="f-step"><option value="">all</option></select></label>
<label>status <select id="f-status"><option value="">all</option></select></label>
<label>score from <input id="f-min" type="number" step="any" size="6"></label>
<label>to <input id="f-max" type="number" step="any" size="6"></label>
<span id="count"></span>
</div>
<div id="samples"></div>
<script id="data" type="application/json">__DATA__</script>
<script>
const D = JSON.parse(document.getElementById("data").textContent);
const el = (tag, text, cls) => { const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e; };
const num = (x) => typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(3)) : String(x);
document.title = D.title;
document.getElementById("title").textContent = D.title;
document.getElementById("config").textContent = JSON.stringify(D.config, null, 2);
if (D.curves) { const img = el("img"); img.src = D.curves; img.alt = "curves"; document.getElementById("curves").append(img); }
else document.getElementById("curves").textContent = "no metrics yet";
(function evals() {
  const box = document.getElementById("evals");
  if (!D.evals.length) { box.textContent = "no evaluations yet"; return; }
  const keys = [...new Set(D.evals.flatMap((e) => Object.keys(e)))];
  const t = el("table"); const h = el("tr"); keys.forEach((k) => h.append(el("th", k))); t.append(h);
  D.evals.forEach((e) => { const r = el("tr"); keys.forEach((k) => r.append(el("td", k in e ? num(e[k]) : ""))); t.append(r); });
  box.append(t);
})();
const status = (s) => s.turns.length ? s.turns[s.turns.length - 1].status || s.stop_reason : s.stop_reason;
const steps = [...new Set(D.samples.map((s) => s.step))].sort((a, b) => a - b);
const statuses = [...new Set(D.samples.map(status))].sort();
steps.forEach((s) => document.getElementById("f-step").append(Object.assign(el("option", String(s)), {value: String(s)})));
statuses.forEach((s) => document.getElementById("f-status").append(Object.assign(el("option", s), {value: s})));
function card(s) {
  const ok = s.turns.some((t) => t.status === "correct") || s.stop_reason === "success";
  const c = el("div", undefined, "sample " + (ok ? "ok" : "fail"));
  c.dataset.step = s.step; c.dataset.status = status(s); c.dataset.score = s.reward;
  c.append(el("div", `step ${s.step} · ${s.task} · reward ${num(s.reward)} · ${status(s)} · ${s.stop_reason}`, "head"));
  c.append(el("div", "prompt", "meta")); c.append(el("pre", s.prompt));
  s.turns.forEach((t, i) => {
    const d = el("div", undefined, "turn");
    const adv = el("span", `advantage ${t.advantage >= 0 ? "+" : ""}${num(t.advantage)}`, t.advantage > 0 ? "pos" : t.advantage < 0 ? "neg" : "");
    const m = el("div", `turn ${i + 1} · ${t.status} · score ${num(t.score)} · `, "meta"); m.append(adv);
    d.append(m, el("pre", t.text));
    if (t.feedback) { d.append(el("div", "feedback", "meta"), el("pre", t.feedback)); }
    c.append(d);
  });
  return c;
}
const list = document.getElementById("samples");
D.samples.forEach((s) => list.append(card(s)));
function apply() {
  const step = document.getElementById("f-step").value, st = document.getElementById("f-status").value;
  const lo = parseFloat(document.getElementById("f-min").value), hi = parseFloat(document.getElementById("f-max").value);
  let shown = 0;
  for (const c of list.children) {
    const sc = parseFloat(c.dataset.score);
    const keep = (!step || c.dataset.step === step) && (!st || c.dataset.status === st) && (isNaN(lo) || sc >= lo) && (isNaN(hi) || sc <= hi);
    c.style.display = keep ? "" : "none"; shown += keep;
  }
  document.getElementById("count").textContent = `${shown} of ${D.samples.length} samples`;
}
["f-step", "f-status", "f-min", "f-max"].forEach((id) => ["input", "change"].forEach((ev) => document.getElementById(id).addEventListener(ev, apply)));
apply();
</script></body></html>
"""


def render(run: Path, smooth: float = 0.0) -> str:
    """The page: the template with the run's data embedded (no `<` in it, so no text can end the script)."""
    data = page_data(run, smooth)
    blob = json.dumps(data).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = data["title"].replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return TEMPLATE.replace("__TITLE__", title).replace("__DATA__", blob)


def write_view(run: str | Path, out: str | Path | None = None, smooth: float = 0.0) -> Path:
    run = Path(run)
    if not 0 <= smooth < 1:
        raise UserError(f"--smooth {smooth:g} is not a smoothing weight; give one in [0, 1), e.g. --smooth 0.6")
    dest = Path(out) if out else run / "view.html"
    atomic_write_text(dest, render(run, smooth))
    return dest


def _serve(path: Path, port: int) -> None:
    import functools
    import http.server

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(path.parent))
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as httpd:
        print(f"serving http://127.0.0.1:{httpd.server_address[1]}/{path.name} (Ctrl-C to stop)", flush=True)
        httpd.serve_forever()


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="tempering view",
        description="Write one self-contained HTML page of a run: curves, evaluations, and its samples "
        "(prompt, each turn's answer, feedback, score, status, advantage), filterable by step, status and score.",
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--out", metavar="FILE", help="where to write the page (default: RUN/view.html)")
    p.add_argument(
        "--serve",
        nargs="?",
        const=8000,
        type=int,
        metavar="PORT",
        help="also serve it on localhost (default port 8000)",
    )
    p.add_argument(
        "--smooth",
        type=float,
        default=0.0,
        metavar="W",
        help="draw per-step curves smoothed by an exponential moving average of weight W in [0, 1), as "
        "TensorBoard's and W&B's smoothing slider (e.g. 0.6; the raw curve stays, faint); default 0: the run's "
        "curves.png",
    )
    a = p.parse_args(argv)
    path = write_view(a.run, a.out, a.smooth)
    print(f"wrote {path}")
    if a.serve is not None:
        _serve(path, a.serve)
    return 0
