"""A task's image, emulated on the sandbox's base: what the Dockerfile makes, or why only Docker can make it.

The sandbox's base is the host's system (its `/usr`, `/bin`, `/etc`) and the project's Python. A
Dockerfile is emulated when everything it does is already there or can be written as files of the
working folder:

- `FROM` an image the base stands in for, known by repository and tag whatever registry serves it
  (`image_name`): Docker's official `python` (`python:3.11-slim`, `docker.io/library/python`, the
  mirror `public.ecr.aws/docker/library/python:3.11-slim`), Terminal-Bench's `python-3-13`, or a plain
  system image (`ubuntu`, `debian`, Terminal-Bench's `ubuntu-24-04`);
- `WORKDIR`, `ENV`, `COPY`/`ADD` of the task's files into the working folder (or `COPY <<EOF` files),
  `EXPOSE` (the ports the tests reach the solution's services on); the no-ops `LABEL`, `CMD`, `ENTRYPOINT`, ...;
- `RUN` commands that create what the image would hold: `mkdir -p`, files written by `printf`, `echo`
  or `cat <<EOF` (computed here, as the image's `/bin/sh`, dash, would write them), `cp` and `chmod` of
  those files, and package installs of what the base already has: Debian packages looked up in the
  host's dpkg status (`apt_installed`, the packages the sandbox's `/usr` holds), Python distributions in
  the project's Python (`pip_installed`; versions are not compared).

Anything else raises `NeedsDocker` with the line that forces Docker (`.line`) and a short `reason` for
tables. Scripts that download tools when they run (`downloads`) raise `NeedsNetwork`, except what the
image's stand-ins satisfy offline (`standins`): `apt-get install` of installed packages, and `uv` /
`uvx` running the project's Python and the distributions it has (a test.sh that installs uv to run a
pinned pytest runs the installed pytest).
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from tempering.envs.terminal.bundle import Bundle, required_imports
from tempering.errors import UserError
from tempering.sandbox.image import PYTHON_DISTRIBUTIONS, SYSTEM_PACKAGES, Spec
from tempering.sandbox.job import check_mount

# -- image names -------------------------------------------------------------------------------------
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
_MIRROR_PREFIXES = ("library/", "docker/library/")
"""Paths under which registries serve Docker's official images (Docker Hub, and mirrors such as
`public.ecr.aws/docker/library/`)."""
_PYTHON_REPOS = re.compile(r"^(?:python|laude-institute/t-bench/python-3-\d+|tempering/base)$")
_SYSTEM_REPOS = re.compile(r"^(?:ubuntu|debian|laude-institute/t-bench/ubuntu-\d+-\d+)$")


def image_name(ref: str) -> tuple[str, str]:
    """(repository, tag) of an image reference, without the registry: `python:3.11-slim`,
    `docker.io/library/python:3.11-slim` and `public.ecr.aws/docker/library/python:3.11-slim` are all
    ("python", "3.11-slim"); `ghcr.io/acme/python:3.12` is ("acme/python", "3.12"). The tag is
    "latest" when none is given."""
    name = _DIGEST.sub("", ref.strip())
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        name = rest  # a registry host
    tag = "latest"
    if ":" in name.rsplit("/", 1)[-1]:
        name, tag = name.rsplit(":", 1)
    for prefix in _MIRROR_PREFIXES:
        if name.startswith(prefix) and "/" not in name[len(prefix) :]:
            name = name[len(prefix) :]
            break
    return name, tag


def base_kind(ref: str) -> str | None:
    """`python` (a python image), `system` (a plain ubuntu or debian image) or None (neither)."""
    repo, _ = image_name(ref)
    if _PYTHON_REPOS.match(repo):
        return "python"
    if _SYSTEM_REPOS.match(repo):
        return "system"
    return None


# -- what the base has -------------------------------------------------------------------------------
DPKG_STATUS = "/var/lib/dpkg/status"


@functools.cache
def debian_packages(status: str = DPKG_STATUS) -> frozenset[str]:
    """Names of the Debian packages installed on the host (whose `/usr` the sandbox shows), and the
    virtual packages they provide, from dpkg's status file (empty where there is none)."""
    try:
        text = open(status, encoding="utf-8", errors="replace").read()
    except OSError:
        return frozenset()
    names: set[str] = set()
    for stanza in text.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, re.M))
        if fields.get("Status", "").split()[-1:] != ["installed"] or "Package" not in fields:
            continue
        names.add(fields["Package"])
        for item in fields.get("Provides", "").split(","):
            if item.strip():
                names.add(item.split("(")[0].strip())
    return frozenset(names)


def apt_installed(pkg: str) -> bool:
    """Whether dpkg lists the package (`curl`, `curl=8.5.0-2`, `libc6:amd64`) as installed."""
    name = re.split(r"[=:]", pkg, maxsplit=1)[0]
    return name in debian_packages()


def pip_installed(req: str) -> bool:
    """Whether the project's Python has the distribution `req` names (versions are not compared)."""
    from importlib import metadata

    name = re.split(r"[<>=!~\[; @]", req, maxsplit=1)[0]
    try:
        metadata.distribution(name)
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return True


# -- shell words -------------------------------------------------------------------------------------


@dataclass
class Command:
    """One simple command of a shell line: its words (redirections left out) and its redirections."""

    words: list[str]
    redirects: list[tuple[str, str]] = field(default_factory=list)
    """(operator, target), e.g. (">", "/app/data.csv"), ("2>", "/dev/null"), ("<<", "EOF")."""
    after: str = ""
    """The operator before it: "" (the first), `&&`, `||`, `;`, `|`, `&`."""


def _tokens(text: str) -> list[tuple[str, bool, int]]:
    """Shell tokens of a script: (text, is_operator, line number). Words lose their quotes as the shell
    removes them; `&&`, `||`, `;`, `|`, `&`, an unquoted newline ("\\n") and redirections (with their file
    descriptor: `2>`, `2>&`) are operators, only outside quotes. A `#` that starts a word starts a
    comment; a heredoc's lines (after `<<EOF`) are its body, not commands."""
    out: list[tuple[str, bool, int]] = []
    word, quoted, start, i, n = "", False, 0, 0, len(text)
    pending: list[tuple[str, bool]] = []  # heredocs opened on this line: (delimiter, strip tabs)
    newlines = [k for k, c in enumerate(text) if c == "\n"]
    line = lambda at: bisect.bisect_left(newlines, at) + 1

    def flush():
        nonlocal word, quoted
        if word or quoted:
            out.append((word, False, line(start)))
        word, quoted = "", False

    while i < n:
        ch = text[i]
        if not word and not quoted:
            start = i
        if ch == "'":
            end = text.find("'", i + 1)
            end = n if end < 0 else end
            word, quoted, i = word + text[i + 1 : end], True, end + 1
        elif ch == '"':
            i += 1
            quoted = True
            while i < n and text[i] != '"':
                if text[i] == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
                    i += 1
                word += text[i]
                i += 1
            i += 1
        elif ch == "\\":
            word, i = word + (text[i + 1 : i + 2] if text[i + 1 : i + 2] != "\n" else ""), i + 2
        elif ch == "\n":
            flush()
            out.append(("\n", True, line(i)))
            i += 1
            for delim, tabs in pending:  # skip the heredoc bodies
                while i < n:
                    end = text.find("\n", i)
                    end = n if end < 0 else end
                    body_line, i = text[i:end], end + 1
                    if (body_line.lstrip("\t") if tabs else body_line) == delim:
                        break
            pending = []
        elif ch.isspace():
            flush()
            i += 1
        elif ch == "#" and not word and not quoted:
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif ch in "&|;<>":
            fd = word if word.isdigit() and not quoted and ch in "<>" else ""
            if fd:
                word = ""
            flush()
            op = ch
            for longer in ("&&", "||", ";;", "|&", ">>", ">&", ">|", "<<-", "<<<", "<<", "<&", "<>", "&>>", "&>"):
                if text.startswith(longer, i) and len(longer) > len(op):
                    op = longer
            out.append((fd + op, True, line(i)))
            i += len(op)
            if op in ("<<", "<<-"):
                m = re.match(r"\s*(['\"]?)([^\s'\"<>|&;]+)\1", text[i:])
                if m:
                    pending.append((m.group(2), op == "<<-"))
        else:
            word += ch
            i += 1
    flush()
    return out


_OPERATORS = {"&&", "||", ";", "|", "&", ";;", "|&", "\n"}


def script_commands(text: str) -> list[tuple[int, Command]]:
    """The simple commands of a shell script, each with the number of the line it starts on (split at
    `&&`, `||`, `;`, `|`, `&` and newlines); a redirection (`2>/dev/null`, `> file`, `<<EOF`) is not a
    word of its command, and a heredoc's body is not commands."""
    out: list[tuple[int, Command]] = []
    cur, at = Command([]), 0
    tokens = _tokens(text)
    i = 0
    while i < len(tokens):
        t, op, n = tokens[i]
        at = at or n
        if op and t in _OPERATORS:
            if cur.words or cur.redirects:
                out.append((at, cur))
            cur, at = Command([], after=t if t != "\n" else ""), 0
        elif op:
            has_target = i + 1 < len(tokens) and not tokens[i + 1][1]
            cur.redirects.append((t, tokens[i + 1][0] if has_target else ""))
            i += has_target
        else:
            cur.words.append(t)
        i += 1
    if cur.words or cur.redirects:
        out.append((at, cur))
    return out


def commands(text: str) -> list[Command]:
    """The simple commands of one shell line (`script_commands` without the line numbers)."""
    return [c for _, c in script_commands(text)]


_VALUE_OPTIONS = {
    "apt": {"-o", "-t", "--target-release", "-c", "--config-file"},
    "pip": {
        "-r",
        "--requirement",
        "-c",
        "--constraint",
        "-e",
        "--editable",
        "-i",
        "--index-url",
        "--extra-index-url",
        "-f",
        "--find-links",
        "-t",
        "--target",
        "--prefix",
        "--root",
        "--python",
        "-p",
        "--platform",
        "--python-version",
        "--implementation",
        "--abi",
        "--src",
        "--cache-dir",
        "--log",
        "--proxy",
        "--timeout",
        "--retries",
        "--trusted-host",
        "--progress-bar",
        "--with",
        "-w",
        "--from",
        "--with-requirements",
    },
}


def install_names(words: list[str], kind: str) -> list[str]:
    """The packages an install command's arguments name: flags, their values and variables are not
    packages (`-y`, `--no-install-recommends`, `-r req.txt`, `$PKGS`)."""
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
        elif w.startswith("-"):
            skip = w in _VALUE_OPTIONS[kind]
        elif w and not w.startswith("$") and w != "\\" and not re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", w):
            out.append(w)
    return out


def _requirements(words: list[str]) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-r", "--requirement")]


def _literal(text: str) -> bool:
    """No expansion (`$`, backquotes) outside single quotes: the shell gives the words as written."""
    quoted = False
    for ch in text:
        if ch == "'":
            quoted = not quoted
        elif ch in "$`" and not quoted:
            return False
    return True


# -- refusals ----------------------------------------------------------------------------------------
class NeedsDocker(Exception):
    """The bundle's environment is outside what the local sandbox can provide (message says why)."""

    def __init__(self, message: str, line: str | None = None, reason: str = "dockerfile"):
        super().__init__(message)
        self.line = line
        """The Dockerfile line (as written, continuations joined) that forces Docker; None for a
        task.toml key or a missing file."""
        self.reason = reason
        """A short label for tables: `base image`, `package not installed`, `build step`, ..."""


class NeedsNetwork(NeedsDocker):
    """The tests (or the solution) download tools when they run; the sandbox has no network."""

    def __init__(self, downloads: list[Download]):
        self.downloads = downloads
        super().__init__(
            "downloads at run time, and the sandbox has no network: " + "; ".join(map(str, downloads)),
            reason="downloads at run time",
        )

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.downloads]


@dataclass(frozen=True)
class Download:
    """One tool or package a script fetches from the network when it runs."""

    name: str
    """What it fetches: `uv`, `pytest==8.4.1`, `curl`, ..."""
    how: str
    """`curl | sh`, `apt-get install`, `pip install`, `uv pip install`, ..."""
    where: str
    """`tests/test.sh line 3`."""

    def __str__(self) -> str:
        return f"{self.name} ({self.how}, {self.where})"


# -- downloads at run time, and the stand-ins that make some of them unnecessary ---------------------
_PIPE_TO_SHELL = re.compile(r"\b(curl|wget)\b[^|]*?(https?://\S+)[^|]*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b")
_KNOWN_INSTALLERS = {"astral.sh/uv": "uv", "get.docker.com": "docker", "sh.rustup.rs": "rustup", "deno.land": "deno"}
_PIP = ("pip", "pip3")


def _pip_at(words: list[str]) -> int | None:
    """Index of `install` in `pip install`, `pip3 install`, `python -m pip install`, or None."""
    for i, w in enumerate(words):
        if w in _PIP or (w.startswith("python") and words[i + 1 : i + 3] == ["-m", "pip"]):
            j = i + 1 if w in _PIP else i + 3
            while j < len(words) and words[j].startswith("-"):
                j += 1
            if j < len(words) and words[j] == "install":
                return j
            return None
    return None


@dataclass
class _Scan:
    """What the scripts fetch, and what of it the stand-ins satisfy offline."""

    missing: list[Download] = field(default_factory=list)
    apt_ok: set[str] = field(default_factory=set)
    """Debian packages the scripts install that are installed (the apt-get stand-in accepts them)."""
    uv: bool = False
    """The scripts use uv or uvx (the stand-ins run the project's Python)."""
    pip_ok: set[str] = field(default_factory=set)
    """Distributions the scripts install that the project's Python has."""


def _scripts(bundle: Bundle) -> dict[str, bytes]:
    scripts = {f"tests/{p}": b for s in bundle.steps for p, b in s.tests.items()}
    scripts |= {
        f"solution/{p}" if not s.name else f"steps/{s.name}/solution/{p}": b
        for s in bundle.steps
        for p, b in s.solution.items()
    }
    return {p: b for p, b in sorted(scripts.items()) if p.endswith(".sh")}


def _uv_packages(words: list[str]) -> list[str]:
    """The distributions a uv / uvx command needs: `uvx --with a pytest==8.4.1 ...` -> [a, pytest==8.4.1];
    `uv add a b`, `uv pip install a`; `uv run --with a pytest ...` -> [a, pytest]."""
    withs = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--with", "-w")]
    withs += [w.split("=", 1)[1] for w in words if w.startswith("--with=")]
    if words[0] == "uvx" or words[1:3] == ["tool", "run"]:
        rest = words[1:] if words[0] == "uvx" else words[3:]
        tool = next((w for i, w in enumerate(rest) if not w.startswith("-") and _not_value(rest, i)), None)
        frm = [rest[i + 1] for i, w in enumerate(rest[:-1]) if w == "--from"]
        return withs + (frm or ([tool] if tool else []))
    sub = words[1] if len(words) > 1 else ""
    if sub == "add" or words[1:3] == ["pip", "install"] or words[1:3] == ["tool", "install"]:
        args = words[2:] if sub == "add" else words[3:]
        return withs + install_names(args, "pip")
    if sub == "run":
        rest = words[2:]
        tool = next((w for i, w in enumerate(rest) if not w.startswith("-") and _not_value(rest, i)), None)
        return withs + ([tool] if tool and tool in ("pytest",) else [])
    return withs


def _not_value(words: list[str], i: int) -> bool:
    return i == 0 or words[i - 1] not in _VALUE_OPTIONS["pip"]


def _scan(bundle: Bundle) -> _Scan:
    scan = _Scan()
    for path, data in _scripts(bundle).items():
        text = data.decode("utf-8", errors="replace")
        for n, line in enumerate(text.replace("\\\n", " ").splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for m in _PIPE_TO_SHELL.finditer(line):
                url = m.group(2).strip("'\"")
                host = url.split("://", 1)[1]
                name = next((v for k, v in _KNOWN_INSTALLERS.items() if host.startswith(k)), host.split("/", 1)[0])
                if name == "uv":
                    scan.uv = True  # the stand-in is uv: the installer's failure offline changes nothing
                else:
                    scan.missing.append(Download(name, f"{m.group(1)} | sh", f"{path} line {n}"))
        for n, cmd in script_commands(text):
            where = f"{path} line {n}"
            words = cmd.words
            while words and (words[0] in ("sudo", "env") or re.fullmatch(r"[A-Za-z_]\w*=\S*", words[0])):
                words = words[1:]
            if not words:
                continue
            if words[0] in ("apt-get", "apt") and "install" in words:
                for p in install_names(words[words.index("install") + 1 :], "apt"):
                    if apt_installed(p):
                        scan.apt_ok.add(p)
                    else:
                        scan.missing.append(Download(p, "apt-get install", where))
            elif words[0] in ("uv", "uvx"):
                scan.uv = True
                how = "uvx" if words[0] == "uvx" else " ".join(words[:2])
                how = "uv pip install" if words[1:3] == ["pip", "install"] else how
                scan.missing += [Download(p, how, where) for p in _uv_packages(words) if not pip_installed(p)]
                scan.pip_ok.update(p for p in _uv_packages(words) if pip_installed(p))
                for req in _requirements(words):
                    scan.missing.append(Download(f"the packages of {req}", how + " -r", where))
            elif (at := _pip_at(words)) is not None:
                how = "pip install" if words[0] in _PIP else f"{words[0]} -m pip install"
                args = words[at + 1 :]
                # pip answers "Requirement already satisfied" offline for what the project's Python has
                upgrade = any(a in ("-U", "--upgrade", "--force-reinstall") for a in args)
                names = install_names(args, "pip")
                scan.pip_ok.update(p for p in names if pip_installed(p))
                scan.missing += [Download(p, how, where) for p in names if upgrade or not pip_installed(p)]
                for req in _requirements(args):
                    scan.missing.append(Download(f"the packages of {req}", how + " -r", where))
            elif words[0] == "npx" or (words[0] in ("npm", "pnpm", "yarn") and words[1:2] in (["install"], ["i"])):
                how = "npx" if words[0] == "npx" else f"{words[0]} install"
                pkgs = [w for w in words[1 if words[0] == "npx" else 2 :] if not w.startswith("-")]
                scan.missing += [Download(p, how, where) for p in (pkgs[:1] if words[0] == "npx" else pkgs)]
    scan.missing.sort(key=lambda d: (d.where.rsplit(" line ", 1)[0], int(d.where.rsplit(" ", 1)[1])))
    return scan


def downloads(bundle: Bundle) -> list[Download]:
    """What the tests and the solutions fetch from the network when they run and the image's stand-ins do
    not provide offline (a scan of their shell scripts: pipes of curl/wget into a shell, apt-get, pip, uv,
    uvx and npm installs). Satisfied offline: `apt-get install` of installed Debian packages, a plain
    `pip install` of a distribution the project's Python has (pip finds it satisfied), uv's installer and
    `uv` / `uvx` commands whose distributions the project's Python has (`standins`)."""
    return _scan(bundle).missing


_UV_STANDIN = r"""
uv() {
  case "$1" in
    init|sync|lock|python) return 0 ;;
    venv)
      shift; local d=.venv
      for a in "$@"; do case "$a" in -*) ;; *) d="$a" ;; esac; done
      mkdir -p "$d/bin" && printf 'deactivate() { :; }\n' > "$d/bin/activate" ;;
    add) return 0 ;;
    pip) [ "$2" = install ] && return 0; command python3 -m pip "${@:2}" ;;
    run)
      shift
      while [ $# -gt 0 ]; do
        case "$1" in
          --with|-w|--python|-p|--directory|--project|--group|--extra|--env-file) shift 2 ;;
          --) shift; break ;;
          -*) shift ;;
          *) break ;;
        esac
      done
      case "$1" in
        python|python3) shift; command python3 "$@" ;;
        *) command "$@" ;;
      esac ;;
    tool) [ "$2" = run ] && { shift 2; uvx "$@"; return; }; return 0 ;;
    *) echo "uv $1: not available offline (tempering's stand-in for uv)" >&2; return 2 ;;
  esac
}
uvx() {
  local from=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --from) from="$2"; shift 2 ;;
      --with|-w|--python|-p|--with-requirements|--index-url|--extra-index-url) shift 2 ;;
      -*) shift ;;
      *) break ;;
    esac
  done
  local tool="${from:-$1}"; tool="${tool%%[=<>@]*}"; shift
  case "$tool" in
    python|python3) command python3 "$@" ;;
    *) if command -v "$tool" >/dev/null; then command "$tool" "$@"; else command python3 -m "${tool//-/_}" "$@"; fi ;;
  esac
}
export -f uv uvx
mkdir -p "$HOME/.local/bin" && : > "$HOME/.local/bin/env"
"""
"""uv and uvx on the project's Python (bash functions, exported to the scripts the jobs run): `uv run
pytest ...` and `uvx pytest==8.4.1 ...` run the installed pytest (its entry point, as uv does); `uv add` / `uv pip install` of what it
has succeed; uv's installer pipe fails offline and its `$HOME/.local/bin/env` exists, empty."""


def standins(bundle: Bundle) -> str:
    """Shell code for the jobs' prologue: the stand-ins the bundle's scripts need (empty when none)."""
    scan = _scan(bundle)
    out = ""
    if scan.apt_ok:
        ok = " ".join(sorted(re.split(r"[=:]", p, maxsplit=1)[0] for p in scan.apt_ok))
        out += (
            "apt_get_standin() {\n"
            '  case "$1" in update|clean|autoclean|autoremove) return 0 ;; esac\n'
            '  [ "$1" = install ] || { echo "apt-get $1: not available offline" >&2; return 100; }\n'
            "  shift; local p\n"
            '  for p in "$@"; do case "$p" in -*) ;; *) case " ' + ok + ' " in *" ${p%%[=:]*} "*) ;; '
            '*) echo "E: Unable to locate package $p (offline)" >&2; return 100 ;; esac ;; esac; done\n'
            "}\n"
            'apt-get() { apt_get_standin "$@"; }\napt() { apt_get_standin "$@"; }\n'
            "export -f apt_get_standin apt-get apt\n"
        )
    if scan.uv:
        out += _UV_STANDIN.lstrip("\n")
    return out


# -- the Dockerfile ----------------------------------------------------------------------------------
_LINE_CMD = re.compile(r"^\s*(\w+)\s*(.*)$", re.S)
_NO_OPS = {"LABEL", "CMD", "ENTRYPOINT", "MAINTAINER", "STOPSIGNAL", "HEALTHCHECK"}
_HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][\w.-]*)\2")


@dataclass
class LocalImage:
    """The emulated environment: the working folder, its initial files and environment variables."""

    workdir: str = "/app"
    """Absolute path of the working folder (WORKDIR, or [environment] workdir)."""
    files: dict[str, bytes] = field(default_factory=dict)
    """Files by path relative to the working folder."""
    dirs: set[str] = field(default_factory=set)
    """Empty folders made by `RUN mkdir -p`, relative to the working folder."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables set by ENV lines."""
    base: str = "python"
    """`python` (a python image) or `system` (ubuntu, debian: the sandbox's base has more tools)."""
    modes: dict[str, int] = field(default_factory=dict)
    """Modes set by `RUN chmod` (others: 0755 for `.sh`, else 0644)."""
    standins: str = ""
    """Shell code every job runs first: the stand-ins of tools the scripts would download (`standins`)."""
    packages: set[str] = field(default_factory=set)
    """Debian packages the Dockerfile and the scripts install (all installed here)."""
    distributions: set[str] = field(default_factory=set)
    """Python distributions the Dockerfile and the scripts install (all in the project's Python)."""
    ports: set[int] = field(default_factory=set)
    """TCP ports the image's services listen on (EXPOSE): the ports the tests reach them on (`Bridge`)."""


@dataclass
class _Line:
    n: int
    """Number of its first line in the file."""
    text: str
    """The instruction, continuation lines joined and spaces collapsed (as shown in messages)."""
    raw: str = ""
    """The instruction as Docker reads it: continuation lines joined, spaces kept (quoted text)."""
    heredocs: list[tuple[str, bool, str]] = field(default_factory=list)
    """(delimiter, quoted, body) of each `<<WORD` it opens, in order."""


def dockerfile_lines(text: str) -> list[_Line]:
    """The instructions, continuation lines joined and comments left out; a `<<EOF` heredoc's lines are
    its body, not instructions."""
    out: list[_Line] = []
    lines = text.splitlines()
    parts: list[str] = []
    start, i = 0, 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not parts and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if parts and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        start = start or i
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        raw = "".join(parts) + line
        item = _Line(start, " ".join(raw.split()), raw)
        for m in _HEREDOC.finditer(raw):
            strip_tabs, quoted, word = m.group(1) == "-", bool(m.group(2)), m.group(3)
            body = []
            while i < len(lines) and (lines[i].lstrip("\t") if strip_tabs else lines[i]) != word:
                body.append(lines[i].lstrip("\t") if strip_tabs else lines[i])
                i += 1
            i += 1  # the delimiter
            item.heredocs.append((word, quoted, "".join(b + "\n" for b in body)))
        out.append(item)
        parts, start = [], 0
    if parts:
        raw = "".join(parts)
        out.append(_Line(start, " ".join(raw.split()), raw))
    return out


def _inside(img: LocalImage, dest: str, n: int, line: str = "") -> str:
    """`dest` relative to the working folder; NeedsDocker when it lies elsewhere."""
    if not dest.startswith("/") and not img.workdir:
        raise NeedsDocker(
            f"Dockerfile line {n}: relative destination {dest} before any WORKDIR", line or None, "no working folder"
        )
    rel = os.path.relpath(os.path.normpath(os.path.join(img.workdir or "/app", dest)), img.workdir or "/app")
    if rel == ".":
        return ""
    if rel.startswith(".."):
        raise NeedsDocker(
            f"Dockerfile line {n}: {dest} is outside the working folder {img.workdir or '/app'}",
            line or None,
            "outside the working folder",
        )
    return rel


def _copy(bundle: Bundle, img: LocalImage, src: str, dest: str, many: bool, n: int, line: str = "") -> None:
    src = src.strip("/") if src not in (".", "./") else ""
    src = src[2:] if src.startswith("./") else src
    into_dir = dest.endswith("/") or many or dest in (".", "./")
    dest = _inside(img, dest, n, line)
    base = f"environment/{src}".rstrip("/")
    matched = {
        p: b
        for p, b in bundle.files.items()
        if (p == base or p.startswith(base + "/")) and p not in ("environment/Dockerfile",)
    }
    if not matched:
        raise NeedsDocker(
            f"Dockerfile line {n}: COPY source {src!r} is not in environment/", line or None, "missing COPY source"
        )
    for p, data in matched.items():
        if p == base:  # a single file
            target = f"{dest}/{src.rsplit('/', 1)[-1]}" if (into_dir or not dest) else dest
        else:
            target = f"{dest}/{p[len(base) + 1 :]}"
        img.files[target.strip("/")] = data


_ESCAPES = {"\\": "\\", "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", '"': '"'}


def _unescape(text: str, octal_needs_zero: bool) -> tuple[str, bool]:
    """dash's backslash escapes (echo: `\\0NNN` octal; printf: `\\NNN`), and whether `\\c` stopped it."""
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch != "\\" or i + 1 == len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "c":
            return "".join(out), True
        if nxt in _ESCAPES and nxt != '"':
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt.isdigit() and nxt in "01234567" and (nxt == "0" or not octal_needs_zero):
            j = i + 2 if octal_needs_zero else i + 1
            digits = re.match(r"[0-7]{0,3}", text[j:]).group(0)  # type: ignore[union-attr]
            out.append(chr(int(digits or "0", 8)))
            i = j + len(digits)
        else:
            out.append(ch)
            i += 1
    return "".join(out), False


def _printf(args: list[str]) -> str | None:
    """What dash's printf writes, for %s, %b, %d, %i, %c and %% conversions (None: another one)."""
    if not args:
        return None
    fmt, rest = args[0], args[1:]
    out = []
    while True:
        used = 0
        pieces = re.split(r"(%[-+ 0#]*\d*(?:\.\d+)?[a-zA-Z%])", fmt)
        for k, piece in enumerate(pieces):
            if k % 2 == 0:
                text, stop = _unescape(piece, octal_needs_zero=False)
                out.append(text)
                if stop:
                    return "".join(out)
                continue
            conv = piece[-1]
            if conv == "%":
                out.append("%")
                continue
            if conv not in "sbdic":
                return None
            arg = rest[used] if used < len(rest) else ""
            used += 1
            spec = piece[1:-1]
            if conv in "di":
                try:
                    value: object = int(arg or "0")
                except ValueError:
                    return None
                out.append(("%" + spec + "d") % value)
            elif conv == "b":
                out.append(("%" + spec + "s") % _unescape(arg, octal_needs_zero=True)[0])
            elif conv == "c":
                out.append(arg[:1])
            else:
                out.append(("%" + spec + "s") % arg)
        rest = rest[used:]
        if not rest or not used:
            return "".join(out)


def _echo(args: list[str]) -> str:
    """What dash's echo writes: `-n` drops the newline, backslash escapes are always read."""
    newline = True
    if args and args[0] == "-n":
        newline, args = False, args[1:]
    text, stop = _unescape(" ".join(args), octal_needs_zero=True)
    return text if stop or not newline else text + "\n"


def _writes_file(img: LocalImage, cmd: Command, heredocs: list[tuple[str, bool, str]], n: int, line: str) -> bool:
    """Reproduce one command that only makes files in the working folder (printf / echo / cat <<EOF to a
    file, cp or chmod of such files, mkdir -p); False when it is something else."""
    words = cmd.words
    out = [(op, t) for op, t in cmd.redirects if op in (">", ">>", "1>", "1>>", ">|")]
    other = [(op, t) for op, t in cmd.redirects if (op, t) not in out and not op.startswith("<<")]
    if not words or other:
        return False
    if words[:2] == ["mkdir", "-p"] and len(words) > 2:
        for d in words[2:]:
            img.dirs.add(_inside(img, d, n, line))
        return True
    if words[0] == "chmod" and len(words) >= 3 and re.fullmatch(r"(?:[0-7]{3,4}|[ugoa]*[+-=][rwx]+)", words[1]):
        for p in words[2:]:
            rel = _inside(img, p, n, line)
            if rel not in img.files:
                return False
            mode = img.modes.get(rel, 0o755 if rel.endswith(".sh") else 0o644)
            if words[1].isdigit():
                mode = int(words[1], 8)
            else:
                who, op, perms = re.fullmatch(r"([ugoa]*)([+-=])([rwx]+)", words[1]).groups()  # type: ignore[union-attr]
                bits = sum({"r": 4, "w": 2, "x": 1}[c] for c in perms)
                mask = sum(bits << s for w, s in (("u", 6), ("g", 3), ("o", 0)) if not who or "a" in who or w in who)
                mode = mode | mask if op == "+" else (mode & ~mask if op == "-" else (mode & ~0o777) | mask)
            img.modes[rel] = mode
        return True
    if words[0] == "cp" and len(words) == 3:
        src = _inside(img, words[1], n, line)
        if src not in img.files:
            return False
        dest = _inside(img, words[2], n, line)
        dest = f"{dest}/{PurePosixPath(src).name}".strip("/") if dest in img.dirs or words[2].endswith("/") else dest
        img.files[dest] = img.files[src]
        return True
    if len(out) != 1:
        return False
    if words[0] == "printf":
        data = _printf(words[1:])
    elif words[0] == "echo":
        data = _echo(words[1:])
    elif words == ["cat"] and len(heredocs) == 1:
        _, quoted, body = heredocs[0]
        data = body if quoted or not re.search(r"[$`\\]", body) else None
    else:
        return False
    if data is None:
        return False
    op, target = out[0]
    rel = _inside(img, target, n, line)
    new = data.encode()
    img.files[rel] = (img.files.get(rel, b"") + new) if op.endswith(">>") else new
    return True


def _run(img: LocalImage, item: _Line, line: str) -> None:
    """A RUN line the image reproduces (files it writes, `mkdir -p`, installs of what the base has, apt's
    cache cleaning), or NeedsDocker naming what it lacks."""
    n, rest = item.n, _LINE_CMD.match(item.raw).group(2)  # type: ignore[union-attr]
    shell = rest.split("<<", 1)[0] if item.heredocs else rest
    literal = _literal(shell)
    heredocs = list(item.heredocs)
    for cmd in commands(rest):
        words = cmd.words
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):  # DEBIAN_FRONTEND=noninteractive ...
            words = words[1:]
        mine = [heredocs.pop(0) for op, _ in cmd.redirects if op.startswith("<<") and heredocs]
        if cmd.after not in ("", "&&", ";"):
            raise NeedsDocker(
                f"Dockerfile line {n}: `{line}` runs a pipeline or a condition (`{cmd.after}`), outside the local "
                "subset",
                line,
                "build step",
            )
        if not words:
            continue
        if words[:2] in (["apt-get", "update"], ["apt", "update"], ["apt-get", "clean"], ["apt-get", "autoremove"]):
            continue
        if words[:2] == ["rm", "-rf"] and all(
            w.startswith(("/var/lib/apt/lists", "/var/cache/apt", "/tmp/", "/root/.cache")) for w in words[2:]
        ):
            continue
        if words[0] in ("apt-get", "apt") and "install" in words:
            missing = [p for p in install_names(words[words.index("install") + 1 :], "apt") if not apt_installed(p)]
            img.packages.update(install_names(words[words.index("install") + 1 :], "apt"))
            if missing:
                raise NeedsDocker(
                    f"Dockerfile line {n}: `{line}` installs {', '.join(missing)}, which the sandbox's base lacks "
                    "(not installed on this host)",
                    line,
                    "package not installed",
                )
            continue
        at = _pip_at(words)
        if at is not None:
            missing = [p for p in install_names(words[at + 1 :], "pip") if not pip_installed(p)]
            missing += [f"the packages of {r}" for r in _requirements(words[at + 1 :])]
            img.distributions.update(install_names(words[at + 1 :], "pip"))
            if missing:
                raise NeedsDocker(
                    f"Dockerfile line {n}: `{line}` installs {', '.join(missing)}, which the project's Python lacks",
                    line,
                    "python package not installed",
                )
            continue
        if literal and _writes_file(img, Command(words, cmd.redirects), mine, n, line):
            continue
        raise NeedsDocker(
            f"Dockerfile line {n}: `{line}` is outside the local subset (files written by printf, echo or cat, "
            "mkdir -p, cp, chmod, and apt-get / pip installs of what the sandbox's base has)",
            line,
            "build step",
        )


_MAX_RANGE = 64
"""Ports one EXPOSE word may name (each gets a listener in the tests' network)."""
_EXPOSED = re.compile(r"(\d+)(?:-(\d+))?(?:/(tcp|udp))?", re.I)


def _exposed(rest: str, n: int, line: str) -> set[int]:
    """The TCP ports of an EXPOSE line (`80`, `8000-8002/tcp`; UDP ones are not forwarded)."""
    ports: set[int] = set()
    for word in rest.split():
        m = _EXPOSED.fullmatch(word)
        low, high = (int(m.group(1)), int(m.group(2) or m.group(1))) if m else (0, 0)
        if not 0 < low <= high < min(65536, low + _MAX_RANGE):
            raise NeedsDocker(
                f"Dockerfile line {n}: EXPOSE {word} is not a port or a range of at most {_MAX_RANGE} ports",
                line,
                "EXPOSE",
            )
        if m and (m.group(3) or "tcp").lower() == "tcp":
            ports |= set(range(low, high + 1))
    return ports


def _compose_services(bundle: Bundle) -> int:
    import yaml

    for p in ("environment/docker-compose.yaml", "environment/docker-compose.yml"):
        if p in bundle.files:
            try:
                return len((yaml.safe_load(bundle.files[p]) or {}).get("services") or {})
            except (yaml.YAMLError, AttributeError):
                return 0
    return 0


def local_image(bundle: Bundle) -> LocalImage:
    """Emulate the bundle's environment on the sandbox's base, or raise NeedsDocker saying why not."""
    env_cfg = bundle.config.environment
    if env_cfg.network_mode == "allowlist":
        raise NeedsDocker(
            f"network_mode = 'allowlist' ({', '.join(env_cfg.allowed_hosts or [])}): the sandbox has no network",
            reason="network allowlist",
        )
    if env_cfg.os != "linux":
        raise NeedsDocker(f"os = {env_cfg.os!r}", reason=f"os {env_cfg.os}")
    for p in bundle.files:
        if p.startswith("environment/docker-compose."):
            services = _compose_services(bundle)
            if services > 1:
                raise NeedsDocker(f"{p}: {services} containers (Docker Compose)", reason="several containers")
            raise NeedsDocker(
                f"{p}: Docker Compose settings beyond one plain container (networks, volumes, dependencies)",
                reason="compose settings",
            )
        if p.startswith("steps/") and "/workdir/" in p:
            raise NeedsDocker(f"{p}: step set-up folders are not emulated locally", reason="step set-up folders")
    if "environment/Dockerfile" not in bundle.files:
        raise NeedsDocker(
            f"no environment/Dockerfile (prebuilt image {env_cfg.docker_image!r})", reason="prebuilt image"
        )
    img = LocalImage(workdir="")
    for item in dockerfile_lines(bundle.text("environment/Dockerfile")):
        n, line = item.n, item.text
        m = _LINE_CMD.match(item.raw)
        instr, rest = (m.group(1).upper(), m.group(2).strip()) if m else (line.strip(), "")
        if instr == "FROM":
            args = [a for a in rest.split() if not a.startswith("--")]
            image = args[0] if args else ""
            kind = base_kind(image)
            if kind is None:
                repo, tag = image_name(image)
                raise NeedsDocker(
                    f"Dockerfile line {n}: base image {image!r} ({repo}:{tag}) is neither a python image nor a plain "
                    "system image (ubuntu, debian) the sandbox's base stands in for",
                    line,
                    "base image",
                )
            img.base = kind
        elif instr == "WORKDIR":
            path = rest if rest.startswith("/") else str(PurePosixPath(img.workdir or "/") / rest)
            if img.workdir and path != img.workdir and (img.files or img.dirs):
                raise NeedsDocker(
                    f"Dockerfile line {n}: a second WORKDIR {rest} (one working folder locally)", line, "second workdir"
                )
            img.workdir = os.path.normpath(path)
        elif instr == "ENV":
            if "=" in rest.split(" ", 1)[0]:
                for word in shlex.split(rest):
                    k, _, v = word.partition("=")
                    img.env[k] = v
            else:
                k, _, v = rest.partition(" ")
                img.env[k] = v.strip()
        elif instr == "COPY" and item.heredocs:
            words = shlex.split(rest.split("<<", 1)[0] + rest.rsplit(item.heredocs[-1][0], 1)[-1])
            targets = [a for a in words if not a.startswith("-")]
            (_, quoted, body), *more = item.heredocs
            if more or len(targets) != 1 or (not quoted and "$" in body):  # Docker would expand its variables
                raise NeedsDocker(f"Dockerfile line {n}: `{line}` is outside the local subset", line, "build step")
            img.files[_inside(img, targets[0], n, line)] = body.encode()
        elif instr in ("COPY", "ADD"):
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            if instr == "ADD" and any("://" in a or a.endswith((".tar", ".gz", ".tgz", ".xz")) for a in args):
                raise NeedsDocker(f"Dockerfile line {n}: ADD of an archive or URL", line, "ADD of an archive or URL")
            if len(args) < 2:
                raise NeedsDocker(f"Dockerfile line {n}: {instr} needs a source and a destination", line, "build step")
            *srcs, dest = args
            for src in srcs:
                _copy(bundle, img, src, dest, len(srcs) > 1, n, line)
        elif instr == "RUN":
            _run(img, item, line)
        elif instr == "EXPOSE":
            img.ports |= _exposed(rest, n, line)
        elif instr not in _NO_OPS:
            raise NeedsDocker(
                f"Dockerfile line {n}: {instr} is outside the local subset (FROM, WORKDIR, COPY, ENV, RUN that "
                "writes files or installs what the sandbox's base has)",
                line,
                f"{instr} instruction",
            )
    img.workdir = env_cfg.workdir or img.workdir
    if not img.workdir:
        raise NeedsDocker(
            "the Dockerfile sets no WORKDIR: the local runner needs the working folder (e.g. WORKDIR /app)",
            reason="no working folder",
        )
    try:
        check_mount(img.workdir)
    except UserError:
        raise NeedsDocker(
            f"working folder {img.workdir} is a system folder of the sandbox", reason="system folder"
        ) from None
    if found := downloads(bundle):
        raise NeedsNetwork(found)
    img.standins = standins(bundle)
    scan = _scan(bundle)
    img.packages |= scan.apt_ok
    img.distributions |= scan.pip_ok
    return img


TERMINAL_PACKAGES = (
    "python3",  # the system's own interpreter: tasks call /usr/bin/python3 by path, not only the tests' Python
    "curl",
    "wget",
    "git",
    "procps",
    "ca-certificates",
    "jq",
    "sqlite3",
    "unzip",
    "zip",
    "xz-utils",
    "file",
)
"""Tools tasks use without installing them (tests fetching uv's installer with curl, git, ps), in a task's
image where the host has them."""


def image_spec(bundle: Bundle, img: LocalImage) -> Spec:
    """The RAM image a task's jobs see (`sandbox.image.Spec`): the sandbox's default one, `TERMINAL_PACKAGES`,
    the Debian packages and Python distributions the task installs, and the distributions of the modules
    its tests' and solutions' files import (`required_imports`)."""
    from importlib import metadata

    packages = {re.split(r"[=:]", p, maxsplit=1)[0] for p in img.packages}
    packages |= {p for p in TERMINAL_PACKAGES if apt_installed(p)}
    files = {f"tests/{p}": b for s in bundle.steps for p, b in s.tests.items()}
    files |= {f"solution/{s.name}/{p}": b for s in bundle.steps for p, b in s.solution.items()}
    by_module = metadata.packages_distributions()
    dists = {re.split(r"[<>=!~\[; @]", d, maxsplit=1)[0] for d in img.distributions}
    dists |= {d for m in required_imports(files) for d in by_module.get(m, [])}
    return Spec(
        tuple(sorted(set(SYSTEM_PACKAGES) | packages)),
        tuple(sorted(set(PYTHON_DISTRIBUTIONS) | {re.sub(r"[-_.]+", "-", d).lower() for d in dists})),
    )
