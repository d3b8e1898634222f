"""A content-addressed build cache: the same sources, command, limits and compiler compile once.

An entry is a folder named by the SHA-256 of (sources, command, environment, host folders read, limits,
compiler identity), holding the artifact and the build's `Result`. Only successful builds are kept: a
failure may come from the moment (a machine so loaded that the build timed out, an input not there
yet), so the next caller builds again; callers that ask for the same build at the same time share one
run, whatever its outcome. Entries are published with one atomic rename, so readers never see a
half-written entry and two processes racing on one key both end up with a valid one. Size is bounded:
the least recently used entries are removed past `max_bytes` (never one used in the last `grace_s`
seconds, so a path just handed out stays valid while a job starts with it).

Compiling runs in the sandbox like any other job: compilers have bugs, and headers can be hostile.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from tempering.errors import UserError
from tempering.sandbox import backends
from tempering.sandbox.job import Job, Limits, Result, check_relpath

BUILD_LIMITS = Limits(wall_s=120.0, cpu_s=120.0, memory_mb=4096, fsize_mb=256, output_bytes=64 * 1024)
"""Default limits of one build job."""


@dataclass
class BuildResult:
    """One build: the artifact's path in the cache (None if the build failed) and how it went."""

    path: Path | None
    """The artifact inside the cache (read-only for jobs: pass it in `Job.ro_binds`)."""
    result: Result
    """The build job's result (its stderr holds compiler errors); from the cache when `cached`."""
    cached: bool
    """True when no compiler ran for this call."""


@functools.lru_cache(maxsize=64)
def _compiler_identity(exe: str, mtime_ns: int) -> str:
    """`exe --version`'s output: changes when the compiler is upgraded (mtime keys the memo)."""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        return out.stdout.decode(errors="replace") + out.stderr.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""


class BuildCache:
    """Content-addressed, size-bounded, LRU cache of build artifacts."""

    def __init__(self, root: str | os.PathLike, max_bytes: int = 2 << 30, grace_s: float = 60.0):
        if not isinstance(max_bytes, int) or max_bytes <= 0:
            raise UserError(f"BuildCache max_bytes must be a positive integer, got {max_bytes!r}.")
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.grace_s = grace_s
        for d in (self.root, self.root / "objects", self.root / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
            d.chmod(0o755)  # jobs run as other users and must read artifacts
        self._running: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def key(
        self,
        files: dict[str, str | bytes],
        cmd: list[str],
        env: dict[str, str] | None = None,
        ro_binds: list[str] | None = None,
        limits: Limits | None = None,
    ) -> str:
        """The entry name for a build; every input that can change the artifact is in it, the limits too
        (the artifact is read back up to fsize_mb, and a build may depend on what it is allowed)."""
        h = hashlib.sha256()

        def put(b: bytes) -> None:
            h.update(len(b).to_bytes(8, "little"))
            h.update(b)

        for name in sorted(files):
            data = files[name]
            put(name.encode())
            put(data.encode() if isinstance(data, str) else data)
        lim = sorted(dataclasses.asdict(limits or BUILD_LIMITS).items())
        put(json.dumps([list(cmd), sorted((env or {}).items()), sorted(ro_binds or []), lim]).encode())
        exe = shutil.which(cmd[0], path=(env or {}).get("PATH", backends.job_path())) if cmd else None
        if exe:
            put(exe.encode())
            put(_compiler_identity(exe, os.stat(exe).st_mtime_ns).encode())
        return h.hexdigest()

    async def build(
        self,
        sandbox,
        files: dict[str, str | bytes],
        cmd: list[str],
        artifact: str,
        limits: Limits | None = None,
        env: dict[str, str] | None = None,
        ro_binds: list[str] | None = None,
    ) -> BuildResult:
        """Run `cmd` over `files` in `sandbox` and keep `artifact`, unless this build is cached.

        `ro_binds`: host folders the compiler needs (e.g. a CUDA toolkit outside /usr); part of the key."""
        rel = check_relpath(artifact, "BuildCache artifact")
        key = self.key(files, cmd, env, ro_binds, limits)
        running = self._running.setdefault(asyncio.get_running_loop(), {})
        while key in running:  # the same build is under way: share its outcome
            under_way = running[key]
            try:
                res = await asyncio.shield(under_way)
            except asyncio.CancelledError:
                if under_way.cancelled():  # its caller gave up, not this one: build it here
                    continue
                raise
            return self._lookup(key, rel) or BuildResult(path=None, result=res, cached=True)
        hit = self._lookup(key, rel)
        if hit is not None:
            return hit
        run = running[key] = asyncio.get_running_loop().create_future()
        try:
            res = await sandbox.run(
                Job(
                    cmd=list(cmd),
                    files=dict(files),
                    env=dict(env or {}),
                    limits=limits or BUILD_LIMITS,
                    outputs=[rel],
                    ro_binds=list(ro_binds or []),
                )
            )
            built = self._store(key, rel, res)
            run.set_result(built.result)
            return built
        except asyncio.CancelledError:
            run.cancel()
            raise
        except BaseException as e:
            run.set_exception(e)
            run.exception()  # retrieved: no "never retrieved" warning when nobody else waits
            raise
        finally:
            del running[key]

    def _lookup(self, key: str, rel: str) -> BuildResult | None:
        entry = self.root / "objects" / key
        try:
            meta = json.loads((entry / "result.json").read_text())
        except (OSError, ValueError):
            return None
        path = entry / "artifact" / rel
        res = Result(**meta)
        if not res.ok or not path.is_file():  # an entry of an older version, which kept failures
            return None
        os.utime(entry)  # most recently used
        return BuildResult(path=path, result=res, cached=True)

    def _store(self, key: str, rel: str, res: Result) -> BuildResult:
        """Publish a successful build; a failed one is only returned."""
        data = res.outputs.get(rel) if res.ok else None
        if res.ok and data is None:
            res = dataclasses.replace(
                res, status="nonzero_exit", message=f"the build exited 0 but left no {rel!r} in its workdir"
            )
        if data is None:
            return BuildResult(path=None, result=res, cached=False)
        tmp = Path(tempfile.mkdtemp(dir=self.root / "tmp"))
        tmp.chmod(0o755)
        meta = dataclasses.asdict(res)
        meta["outputs"] = {}
        out = tmp / "artifact" / rel
        out.parent.mkdir(parents=True, mode=0o755)
        out.write_bytes(data)
        out.chmod(0o755)
        (tmp / "result.json").write_text(json.dumps(meta))
        entry = self.root / "objects" / key
        try:
            os.rename(tmp, entry)
        except OSError:  # another process published this key first: theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
        self._evict(keep=entry)
        hit = self._lookup(key, rel)
        assert hit is not None
        return BuildResult(path=hit.path, result=res, cached=False)

    def size_bytes(self) -> int:
        return sum(s for _, _, s in self._entries())

    def _entries(self) -> list[tuple[float, Path, int]]:
        out = []
        for entry in (self.root / "objects").iterdir():
            try:
                size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
                out.append((entry.stat().st_mtime, entry, size))
            except OSError:  # removed meanwhile by another process
                pass
        return out

    def _evict(self, keep: Path) -> None:
        entries = sorted(self._entries())
        total = sum(s for _, _, s in entries)
        now = time.time()
        for mtime, entry, size in entries:
            if total <= self.max_bytes:
                break
            if entry == keep or now - mtime < self.grace_s:
                continue
            shutil.rmtree(entry, ignore_errors=True)
            total -= size
