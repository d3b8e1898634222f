"""`filetree`: sort the files of an inbox folder into sorted/, through up to four stages.

depth 1: a flat inbox/ -> every file moves to sorted/<class>/<name>; inbox/ ends empty
depth 2: + inbox/ has nested folders (names are unique across the tree)
depth 3: + rename.csv gives new names for some files (classify by the new name)
depth 4: + some files are byte-identical duplicates: keep one, list the others in duplicates.txt
features: hidden (dot-files stay where they are), manifest (manifest.csv with sha256), moves (moves.csv)
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from tempering.synth.families.base import Family, Params, Spec

DOMAINS = {
    "photos": dict(stems=["beach", "tower", "cat", "sunset", "forest", "bridge", "harbor"], exts=["jpg", "png", "raw"]),
    "docs": dict(stems=["report", "notes", "draft", "invoice", "memo", "plan", "minutes"], exts=["pdf", "txt", "md"]),
    "code": dict(stems=["main", "utils", "parser", "server", "config", "model", "cli"], exts=["py", "js", "c"]),
}
SMALL, LARGE = 500, 1500
OP_TEXT = {
    "by_extension": "its lower-case extension without the dot",
    "by_size": f"`small` if it has fewer than {SMALL} bytes, `medium` if fewer than {LARGE}, else `large`",
    "by_initial": "the first letter of its name",
}


def _classify(op: str, name: str, size: int) -> str:
    if op == "by_extension":
        return name.rsplit(".", 1)[1].lower()
    if op == "by_size":
        return "small" if size < SMALL else "medium" if size < LARGE else "large"
    return name[0].lower()


def _sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


class FileTree(Family):
    name = "filetree"
    core_skills = ("filesystem", "shell")
    depth_skills = {2: "recursion", 3: "mapping", 4: "hashing"}
    features = {"hidden": "filtering", "manifest": "hashing", "moves": "csv"}
    ops = ("by_extension", "by_size", "by_initial")
    domains = tuple(DOMAINS)

    def build(self, p: Params, rng: random.Random) -> Spec:
        d = DOMAINS[p.domain]
        n = 5 + 2 * p.depth
        names: list[str] = []
        while len(names) < n:
            name = f"{rng.choice(d['stems'])}_{rng.randint(1, 99)}.{rng.choice(d['exts'])}"
            if name not in names:
                names.append(name)
        dirs = ["", "2023", "2024/q1", "misc"] if p.depth >= 2 else [""]
        files = {}  # inbox-relative path -> content
        for name in names:
            size = rng.choice([rng.randint(20, SMALL - 1), rng.randint(SMALL, LARGE - 1), rng.randint(LARGE, 3000)])
            body = "".join(rng.choice("abcdefghij \n") for _ in range(size)).encode()
            files[f"{rng.choice(dirs)}/{name}".lstrip("/")] = body
        steps = []
        if p.depth >= 4:
            for orig in rng.sample(sorted(files), 2):
                stem, ext = orig.rsplit("/", 1)[-1].rsplit(".", 1)
                files[f"{rng.choice(dirs)}/{stem}-copy.{ext}".lstrip("/")] = files[orig]
        hidden = {}
        if "hidden" in p.features:
            hidden = {f"{rng.choice(dirs)}/.{rng.choice(d['stems'])}.lock".lstrip("/"): b"lock\n" for _ in range(2)}
            steps.append("Files whose name starts with a dot are not part of the inbox: leave them where they are.")
        fixtures = {f"inbox/{k}": v for k, v in {**files, **hidden}.items()}
        rename = {}
        if p.depth >= 3:
            for n, path in enumerate(rng.sample(sorted(files), 2)):
                base = path.rsplit("/", 1)[-1]
                rename[base] = f"{rng.choice(d['stems'])}_{100 * (n + 1) + rng.randint(0, 99)}.{base.rsplit('.', 1)[1]}"
            fixtures["rename.csv"] = ("old,new\n" + "".join(f"{o},{w}\n" for o, w in rename.items())).encode()
            steps.append(
                "rename.csv (columns old,new) gives a new name to some files: store them under the new "
                "name and classify them by it."
            )
        kept, dropped, moves = {}, [], []
        seen = {}
        for path in sorted(files):
            data = files[path]
            if p.depth >= 4 and _sha16(data) in seen:
                dropped.append(path)
                continue
            seen[_sha16(data)] = path
            name = rename.get(path.rsplit("/", 1)[-1], path.rsplit("/", 1)[-1])
            dest = f"{_classify(p.op, name, len(data))}/{name}"
            kept[dest] = data
            moves.append([f"inbox/{path}", f"sorted/{dest}"])
        if p.depth >= 4:
            steps.append(
                "Some files are byte-identical copies of others: of each set of identical files keep only "
                "the one whose path inside inbox/ sorts first, delete the rest, and list the deleted paths "
                "(relative to inbox/, sorted) in duplicates.txt, one per line."
            )
        checks: list[tuple[str, str, Any]] = [
            ("tree", "sorted", {k: _sha16(v) for k, v in kept.items()}),
            ("absent", "inbox", None),
        ]
        if p.depth >= 4:
            checks.append(("text", "duplicates.txt", dropped))
        if "manifest" in p.features:
            rows = [["path", "size", "sha256"]] + [
                [k, len(v), hashlib.sha256(v).hexdigest()] for k, v in sorted(kept.items())
            ]
            checks.append(("csv", "manifest.csv", rows))
            steps.append(
                "Write manifest.csv with header `path,size,sha256` and one row per file under sorted/ "
                "(path relative to sorted/, size in bytes, hex SHA-256), sorted by path."
            )
        if "moves" in p.features:
            checks.append(("csv", "moves.csv", [["from", "to"]] + sorted(moves)))
            steps.append(
                "Write moves.csv with header `from,to` listing each moved file's old and new path "
                "(relative to the working directory, e.g. inbox/a.txt,sorted/x/a.txt), sorted by `from`."
            )
        where = "in inbox/ and its sub-folders" if p.depth >= 2 else "in inbox/"
        instruction = "\n\n".join(
            [
                f"The working directory holds {p.domain} files ({', '.join('.' + e for e in d['exts'])}) {where}. Move every file to sorted/CLASS/NAME, where NAME is the "
                f"file's name (without its folders) and CLASS is {OP_TEXT[p.op]}. When you are done, inbox/ must "
                "hold no file (empty folders may stay); sorted/ must hold nothing else.",
            ]
            + ([" ".join(steps)] if steps else [])
        )
        config = {
            "kind": p.domain,
            "op": p.op,
            "small": SMALL,
            "large": LARGE,
            "depth": p.depth,
            "features": list(p.features),
        }
        return Spec(instruction, fixtures, SOLUTION.replace("CONFIG_JSON", json.dumps(config)), checks)


SOLUTION = '''
import csv, hashlib, json, os, shutil
C = json.loads(r"""CONFIG_JSON""")
rename = {}
if C["depth"] >= 3:
    with open("rename.csv") as f:
        rename = {row["old"]: row["new"] for row in csv.DictReader(f)}
paths = []
for d, dirs, files in os.walk("inbox"):
    for name in files:
        if "hidden" in C["features"] and name.startswith("."):
            continue
        paths.append(os.path.relpath(os.path.join(d, name), "inbox"))
seen, dropped, moves = set(), [], []
for rel in sorted(paths):
    src = os.path.join("inbox", rel)
    data = open(src, "rb").read()
    digest = hashlib.sha256(data).hexdigest()
    if C["depth"] >= 4 and digest in seen:
        dropped.append(rel)
        os.remove(src)
        continue
    seen.add(digest)
    name = rename.get(os.path.basename(rel), os.path.basename(rel))
    if C["op"] == "by_extension":
        cls = name.rsplit(".", 1)[1].lower()
    elif C["op"] == "by_size":
        cls = "small" if len(data) < C["small"] else "medium" if len(data) < C["large"] else "large"
    else:
        cls = name[0].lower()
    dest = os.path.join("sorted", cls, name)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    shutil.move(src, dest)
    moves.append([src, dest])
if C["depth"] >= 4:
    open("duplicates.txt", "w").write("".join(p + "\\n" for p in dropped))
if "manifest" in C["features"]:
    with open("manifest.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "size", "sha256"])
        rows = []
        for d, dirs, files in os.walk("sorted"):
            for name in files:
                full = os.path.join(d, name)
                data = open(full, "rb").read()
                rows.append([os.path.relpath(full, "sorted"), len(data), hashlib.sha256(data).hexdigest()])
        w.writerows(sorted(rows))
if "moves" in C["features"]:
    with open("moves.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["from", "to"])
        w.writerows(sorted(moves))
'''
