"""`logscan`: answer a question about application logs, through up to four stages.

Log lines read `YYYY-MM-DDTHH:MM:SS LEVEL component message user=NAME`.
depth 1: app.log -> answer.txt
depth 2: + the rotated file app.log.1 (older lines) is part of the log
depth 3: + ignore.txt: lines containing any of its substrings do not count
depth 4: + components.txt: also write summary.csv with the error count of each listed component
features: time_window (window.txt), gzip (logs are gzip-compressed), levels (levels.json maps codes)
"""

from __future__ import annotations

import gzip
import json
import random
from typing import Any

from tempering.synth.families.base import Family, Params, Spec

DOMAINS = {
    "web": dict(components=["api", "db", "cache", "auth"], words=["timeout", "refused", "slow query", "bad gateway"]),
    "billing": dict(components=["invoice", "ledger", "payments"], words=["declined", "overdraft", "retry", "mismatch"]),
    "queue": dict(
        components=["worker", "broker", "scheduler", "janitor"], words=["lost ack", "requeued", "stalled", "oom"]
    ),
}
USERS = ["alice", "bob", "carol", "dave", "erin", "frank"]
CODES = {"I": "INFO", "W": "WARN", "E": "ERROR", "F": "ERROR"}
OP_TEXT = {
    "count_errors": "the number of ERROR lines, as an integer",
    "distinct_users": "the number of distinct user= names on ERROR lines, as an integer",
    "top_component": "the component with the most ERROR lines (alphabetically first on a tie; `none` if there are none)",
}


def _lines(rng: random.Random, n: int, day: int, d: dict, coded: bool) -> list[tuple[str, str, str, str]]:
    out = []
    for _ in range(n):
        ts = f"2024-05-{day:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        level = rng.choices(["INFO", "WARN", "ERROR"], [5, 2, 3])[0]
        if coded:
            level = rng.choice([c for c, v in CODES.items() if v == level])
        msg = f"{rng.choice(d['words'])} user={rng.choice(USERS)}"
        out.append((ts, level, rng.choice(d["components"]), msg))
    return sorted(out)


class LogScan(Family):
    name = "logscan"
    core_skills = ("text-parsing", "aggregation")
    depth_skills = {2: "file-io", 3: "filtering", 4: "csv"}
    features = {"time_window": "dates", "gzip": "compression", "levels": "mapping"}
    ops = ("count_errors", "distinct_users", "top_component")
    domains = tuple(DOMAINS)

    def build(self, p: Params, rng: random.Random) -> Spec:
        d, coded = DOMAINS[p.domain], "levels" in p.features
        files = {"app.log": _lines(rng, 12 + 6 * p.depth + rng.randint(0, 9), 2, d, coded)}
        if p.depth >= 2:
            files["app.log.1"] = _lines(rng, 10 + rng.randint(0, 9), 1, d, coded)
        gz = "gzip" in p.features
        fixtures, steps = {}, []
        for name, lines in files.items():
            text = "".join(f"{ts} {lv} {comp} {msg}\n" for ts, lv, comp, msg in lines).encode()
            fixtures[name + ".gz" if gz else name] = gzip.compress(text, mtime=0) if gz else text
        names = sorted(fixtures)
        rows = [line for lines in files.values() for line in lines]
        if p.depth >= 3:
            ignore = rng.sample(d["words"], 1) + [f"user={rng.choice(USERS)}"]
            fixtures["ignore.txt"] = ("\n".join(ignore) + "\n").encode()
            rows = [r for r in rows if not any(s in " ".join(r) for s in ignore)]
            steps.append("Skip every line that contains any of the substrings listed in ignore.txt (one per line).")
        if coded:
            fixtures["levels.json"] = json.dumps(CODES).encode()
            rows = [(ts, CODES[lv], comp, msg) for ts, lv, comp, msg in rows]
            steps.append("The level field holds a one-letter code; levels.json maps each code to its level.")
        if "time_window" in p.features:
            day = 2 if p.depth == 1 else rng.choice([1, 2])
            start, end = sorted(rng.sample(range(0, 24), 2))
            lo, hi = f"2024-05-{day:02d}T{start:02d}:00:00", f"2024-05-{day:02d}T{end:02d}:00:00"
            fixtures["window.txt"] = f"{lo} {hi}\n".encode()
            rows = [r for r in rows if lo <= r[0] < hi]
            steps.append(
                f"Only lines with lo <= timestamp < hi count, where window.txt holds `lo hi` (currently {lo} {hi})."
            )
        errors = [r for r in rows if r[1] == "ERROR"]
        per: dict[str, int] = {}
        for r in errors:
            per[r[2]] = per.get(r[2], 0) + 1
        if p.op == "count_errors":
            answer = str(len(errors))
        elif p.op == "distinct_users":
            answer = str(len({r[3].split("user=")[1] for r in errors}))
        else:
            answer = min(per, key=lambda c: (-per[c], c)) if per else "none"
        checks: list[tuple[str, str, Any]] = [("text", "answer.txt", [str(len(rows)), answer])]
        out = [
            f"Write two lines to answer.txt: first the number of log lines that count (after the rules above), "
            f"then {OP_TEXT[p.op]}."
        ]
        if p.depth >= 4:
            listed = sorted(rng.sample(d["components"], len(d["components"]) - 1))
            fixtures["components.txt"] = ("\n".join(listed) + "\n").encode()
            counts: list[list[Any]] = [[c, per.get(c, 0)] for c in listed]  # [component, errors] rows
            want = [["component", "errors"]] + sorted(counts, key=lambda x: (-x[1], x[0]))
            checks.append(("csv", "summary.csv", want))
            out.append(
                "Also write summary.csv with header `component,errors` and one row for each component "
                "listed in components.txt (zero counts included), sorted by errors descending, then name."
            )
        intro = (
            f"The working directory holds the log file(s) {', '.join(names)} of the {p.domain} service "
            f"(components: {', '.join(d['components'])})"
            + (" (gzip-compressed)" if gz else "")
            + ". Each line reads `TIMESTAMP LEVEL COMPONENT MESSAGE`, "
            "and every message ends with `user=NAME`."
        )
        if p.depth >= 2:
            intro += " app.log.1 holds the older lines; both files are part of the log."
        instruction = "\n\n".join([intro] + ([" ".join(steps)] if steps else []) + [" ".join(out)])
        config = {
            "service": p.domain,
            "components": d["components"],
            "op": p.op,
            "files": names,
            "gz": gz,
            "coded": coded,
            "depth": p.depth,
            "window": "time_window" in p.features,
        }
        return Spec(instruction, fixtures, SOLUTION.replace("CONFIG_JSON", json.dumps(config)), checks)


SOLUTION = '''
import collections, csv, gzip, json
C = json.loads(r"""CONFIG_JSON""")
lines = []
for name in C["files"]:
    opener = gzip.open if C["gz"] else open
    with opener(name, "rt") as f:
        lines += [l.rstrip("\\n") for l in f if l.strip()]
codes = json.load(open("levels.json")) if C["coded"] else {}
ignore = open("ignore.txt").read().split("\\n") if C["depth"] >= 3 else []
ignore = [s for s in ignore if s]
lo = hi = None
if C["window"]:
    lo, hi = open("window.txt").read().split()
errors, counted = [], 0
for l in lines:
    ts, level, comp, msg = l.split(" ", 3)
    level = codes.get(level, level)
    if any(s in l for s in ignore) or (lo and not lo <= ts < hi):
        continue
    counted += 1
    if level == "ERROR":
        errors.append((comp, msg.rsplit("user=", 1)[1]))
per = collections.Counter(c for c, _ in errors)
if C["op"] == "count_errors":
    ans = len(errors)
elif C["op"] == "distinct_users":
    ans = len({u for _, u in errors})
else:
    ans = sorted(per.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if per else "none"
open("answer.txt", "w").write(f"{counted}\\n{ans}\\n")
if C["depth"] >= 4:
    listed = open("components.txt").read().split()
    with open("summary.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["component", "errors"])
        for c in sorted(listed, key=lambda c: (-per[c], c)):
            w.writerow([c, per[c]])
'''
