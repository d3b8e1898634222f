"""`ledger`: aggregate a CSV of money records, through up to four stages of joins and fixes.

depth 1: one result over all records -> answer.txt
depth 2: + a lookup file that maps each record's key to a group -> report.csv (one row per group)
depth 3: + corrections.csv that overrides the amount of some records first
depth 4: + a currency column and rates.json to convert amounts before aggregating
features: date_window (window.json), exclusions (blocked.txt), aliases (aliases.csv)
"""

from __future__ import annotations

import csv
import io
import json
import random
from typing import Any

from tempering.synth.families.base import Family, Params, Spec

DOMAINS: dict[str, dict[str, Any]] = {
    "shop": dict(
        records="orders.csv",
        key="customer",
        amount="total",
        lookup="customers.csv",
        group="city",
        keys=["ana", "bo", "chen", "dara", "eli", "fay", "gus", "hana"],
        groups=["lyon", "oslo", "porto"],
    ),
    "bank": dict(
        records="transfers.csv",
        key="account",
        amount="amount",
        lookup="accounts.csv",
        group="branch",
        keys=["ac-101", "ac-102", "ac-207", "ac-310", "ac-311", "ac-415", "ac-520"],
        groups=["north", "south"],
    ),
    "payroll": dict(
        records="payments.csv",
        key="employee",
        amount="gross",
        lookup="staff.csv",
        group="team",
        keys=["e01", "e02", "e03", "e04", "e05", "e06", "e07", "e08", "e09"],
        groups=["ops", "sales", "rnd", "hr"],
    ),
}
OP_TEXT = {
    "sum": "the sum of the amounts",
    "count_over": "the number of records whose amount is greater than {threshold}",
    "max": "the largest amount",
}
RATES = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}


def _csv(rows: list[list]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode()


def _fmt(op: str, v: float) -> float | int:
    return int(v) if op == "count_over" else round(v, 2)


class Ledger(Family):
    name = "ledger"
    core_skills = ("csv", "aggregation")
    depth_skills = {2: "join", 3: "data-cleaning", 4: "unit-conversion"}
    features = {"date_window": "dates", "exclusions": "filtering", "aliases": "mapping"}
    ops = ("sum", "count_over", "max")
    domains = tuple(DOMAINS)

    def build(self, p: Params, rng: random.Random) -> Spec:
        d = DOMAINS[p.domain]
        keys, n = d["keys"], 10 + 5 * p.depth
        threshold = rng.choice([50, 100, 150])
        recs: list[dict[str, Any]] = []
        for i in range(n):
            rec: dict[str, Any] = {"id": i + 1, "key": rng.choice(keys), "amount": round(rng.uniform(5, 250), 2)}
            if "date_window" in p.features:
                rec["date"] = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
            if p.depth >= 4:
                rec["currency"] = rng.choice(list(RATES))
            recs.append(rec)
        fixtures: dict[str, bytes] = {}
        steps: list[str] = []
        cols = (
            ["id", d["key"], d["amount"]]
            + (["date"] if "date_window" in p.features else [])
            + (["currency"] if p.depth >= 4 else [])
        )
        fixtures[d["records"]] = _csv(
            [cols]
            + [
                [r["id"], r["key"], f"{r['amount']:.2f}"]
                + ([r["date"]] if "date" in r else [])
                + ([r["currency"]] if "currency" in r else [])
                for r in recs
            ]
        )
        rows = [dict(r) for r in recs]
        if "aliases" in p.features:
            old = rng.sample(keys, 2)
            new = [f"{k}-new" for k in old]
            fixtures["aliases.csv"] = _csv([["old", "new"]] + [[o, w] for o, w in zip(old, new)])
            for r in rows:
                r["key"] = dict(zip(old, new)).get(r["key"], r["key"])
            steps.append(
                f"First rename keys with aliases.csv (columns old,new): a record whose {d['key']} equals "
                "`old` counts under `new` from then on."
            )
        if "exclusions" in p.features:
            blocked = sorted(rng.sample(sorted({r["key"] for r in rows}), 2))
            fixtures["blocked.txt"] = ("\n".join(blocked) + "\n").encode()
            rows = [r for r in rows if r["key"] not in blocked]
            steps.append(
                f"Drop every record whose {d['key']} (after renaming) is listed in blocked.txt (one per line)."
            )
        if "date_window" in p.features:
            start, end = sorted([f"2024-{m:02d}-01" for m in rng.sample(range(2, 12), 2)])
            fixtures["window.json"] = json.dumps({"start": start, "end": end}).encode()
            rows = [r for r in rows if start <= r["date"] <= end]
            steps.append(
                f"Keep only records dated within window.json's start and end, both inclusive "
                f"(currently {start} to {end})."
            )
        if p.depth >= 3:
            fixed = rng.sample(recs, 3)
            new_amounts = {r["id"]: round(rng.uniform(5, 250), 2) for r in fixed}
            fixtures["corrections.csv"] = _csv(
                [["id", d["amount"]]] + [[i, f"{a:.2f}"] for i, a in new_amounts.items()]
            )
            for r in rows:
                r["amount"] = new_amounts.get(r["id"], r["amount"])
            steps.append(
                f"Apply corrections.csv (columns id,{d['amount']}): it replaces the {d['amount']} of the "
                "records with those ids."
            )
        if p.depth >= 4:
            fixtures["rates.json"] = json.dumps(RATES).encode()
            for r in rows:
                r["amount"] = r["amount"] * RATES[r["currency"]]
            steps.append(
                "Convert every amount to EUR by multiplying it with rates.json's rate for the record's "
                "currency (do not round before aggregating)."
            )

        def agg(amounts: list[float]) -> float:
            if p.op == "sum":
                return sum(amounts)
            if p.op == "count_over":
                return sum(1 for a in amounts if a > threshold)
            return max(amounts, default=0.0)

        what = OP_TEXT[p.op].format(threshold=threshold)
        fmt = "an integer" if p.op == "count_over" else "a number rounded to 2 decimals"
        if p.depth == 1:
            checks: list[tuple[str, str, Any]] = [
                ("number", "answer.txt", _fmt(p.op, agg([r["amount"] for r in rows])))
            ]
            out = f"Write {what} over the remaining records to answer.txt, as {fmt} on one line (0 if none)."
        else:
            groups = d["groups"]
            owner = {k: groups[i % len(groups)] for i, k in enumerate(sorted({r["key"] for r in rows} | set(keys)))}
            fixtures[d["lookup"]] = _csv([[d["key"], d["group"]]] + sorted([k, g] for k, g in owner.items()))
            table: dict[str, list[float]] = {}
            for r in rows:
                table.setdefault(owner[r["key"]], []).append(r["amount"])
            want = [[d["group"], "value"]] + [[g, _fmt(p.op, agg(a))] for g, a in sorted(table.items())]
            checks = [("csv", "report.csv", want)]
            out = (
                f"Look up each record's {d['group']} in {d['lookup']} (columns {d['key']},{d['group']}; it "
                f"lists renamed keys too) and write report.csv with header `{d['group']},value` and one row per "
                f"{d['group']} that has records left, sorted by {d['group']}; value is {what} in that "
                f"{d['group']}, as {fmt}."
            )
        intro = (
            f"The working directory holds {d['records']} with columns {', '.join(cols)}: one record per "
            f"line, amounts in the `{d['amount']}` column."
        )
        instruction = "\n\n".join([intro] + ([" ".join(steps)] if steps else []) + [out])
        config = {"op": p.op, "threshold": threshold, "depth": p.depth, "features": list(p.features), **d}
        return Spec(instruction, fixtures, SOLUTION.replace("CONFIG_JSON", json.dumps(config)), checks)


SOLUTION = '''
import csv, json
C = json.loads(r"""CONFIG_JSON""")
with open(C["records"]) as f:
    recs = list(csv.DictReader(f))
for r in recs:
    r["k"], r["a"] = r[C["key"]], float(r[C["amount"]])
if "aliases" in C["features"]:
    with open("aliases.csv") as f:
        alias = {row["old"]: row["new"] for row in csv.DictReader(f)}
    for r in recs:
        r["k"] = alias.get(r["k"], r["k"])
if "exclusions" in C["features"]:
    blocked = set(open("blocked.txt").read().split())
    recs = [r for r in recs if r["k"] not in blocked]
if "date_window" in C["features"]:
    w = json.load(open("window.json"))
    recs = [r for r in recs if w["start"] <= r["date"] <= w["end"]]
if C["depth"] >= 3:
    with open("corrections.csv") as f:
        fix = {row["id"]: float(row[C["amount"]]) for row in csv.DictReader(f)}
    for r in recs:
        r["a"] = fix.get(r["id"], r["a"])
if C["depth"] >= 4:
    rates = json.load(open("rates.json"))
    for r in recs:
        r["a"] *= rates[r["currency"]]


def agg(xs):
    if C["op"] == "sum":
        return round(sum(xs), 2)
    if C["op"] == "count_over":
        return sum(1 for x in xs if x > C["threshold"])
    return round(max(xs), 2) if xs else 0


if C["depth"] == 1:
    open("answer.txt", "w").write(f"{agg([r['a'] for r in recs])}\\n")
else:
    with open(C["lookup"]) as f:
        owner = {row[C["key"]]: row[C["group"]] for row in csv.DictReader(f)}
    groups = {}
    for r in recs:
        groups.setdefault(owner[r["k"]], []).append(r["a"])
    with open("report.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([C["group"], "value"])
        for g in sorted(groups):
            w.writerow([g, agg(groups[g])])
'''
