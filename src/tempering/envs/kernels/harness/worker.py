"""A warm verification worker: torch is imported once, and each candidate runs the harness (verify.py,
unchanged) in a fresh process forked from this one, so it pays neither the import nor a sandbox's
start (read-only; started by the verifier as a sandbox job).

stdin: a line {"isolated": bool}, then one line per candidate, {"nonce", "config", "files": {name:
base64}, "env", "wall_s", "cpu_s"}, each sent after the answer to the previous one; the worker ends
at the end of its stdin. stdout: one line per candidate, {"result" (the judge's result line, or null),
"exit_code", "signal", "timeout", "wall_s", "cpu_s", "stderr", "dirty"}.

Candidates stay apart: each runs in a private folder that holds only its own files (written just
before its turn); the judge's result comes back on a pipe only the judge holds (the candidate's own
process closes it before the submission runs). No process of a candidate can create a POSIX message
queue (RLIMIT_MSGQUEUE is 0 for all of them, a hard limit): those queues outlive their creator and
the worker could not list them to remove them. After each candidate, everything it may have left is
gone before the next one starts: its processes (in the job's PID namespace nothing else can be
signalled), files in /tmp and in the workdir (folders it made unreadable included, and no link
followed), and the System V IPC objects of the job's IPC namespace. The worker then checks that /tmp
and the workdir hold nothing the candidate made; if anything is left, it answers for this candidate
with `dirty` set and ends, so the next candidate starts in a fresh worker. This process is not
dumpable, so a candidate (same uid) can neither trace it nor open its memory or descriptors; a
candidate that kills it is charged with it, and the verifier starts another worker for the rest.
"""

import base64
import ctypes
import json
import os
import select
import signal
import stat
import sys
import tempfile
import time
import traceback

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 0, before anything else

import ckernel  # noqa: E402,F401
import cleanup  # noqa: E402
import runner  # noqa: E402
import torch  # noqa: E402,F401  (the import every candidate shares)
import verify  # noqa: E402  (the judge)

runner.warm_imports()  # what a candidate's process would otherwise import (seconds) on first use
verify.ipsample.warm()  # torch's symbol tables, which every judge reads to name where its samples fell

RESULT_CAP = 1 << 20
TAIL = 1500


def _read_capped(path, cap):
    """A regular file's first `cap` bytes, not following links; None if absent or not a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, cap)
    finally:
        os.close(fd)


def _child(item, folder, nonce_fd, result_fd):
    """In the forked process: the judge as if it had been started for this candidate alone."""
    code = 1
    try:
        os.setpgid(0, 0)
        os.chdir(folder)
        import resource

        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))  # for every process of this candidate
        err = os.open("stderr.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for src, dst in ((nonce_fd, 0), (result_fd, 1), (err, 2)):
            os.dup2(src, dst)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        cpu = max(1, int(item["cpu_s"]))
        if hard != resource.RLIM_INFINITY:
            cpu = min(cpu, hard - 1)
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        os.environ.update(item["env"])
        verify.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _run(item, isolated, workdir):
    folder = tempfile.mkdtemp(prefix="candidate-")
    for name, data in item["files"].items():
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        os.chmod(path, 0o755 if name.endswith(".so") or name == "kernel_host" else 0o644)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(item["config"], f)
    nonce_r, nonce_w = os.pipe()
    os.write(nonce_w, (item["nonce"] + "\n").encode())
    os.close(nonce_w)
    result_r, result_w = os.pipe()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(result_r)
        _child(item, folder, nonce_r, result_w)
    os.close(nonce_r)
    os.close(result_w)
    pidfd = os.pidfd_open(pid)
    result, timed_out = bytearray(), False
    deadline = t0 + item["wall_s"]
    open_fds = [result_r, pidfd]
    while open_fds:  # until the judge has exited and its result pipe has ended, in whichever order
        left = deadline - time.monotonic()
        ready = select.select(open_fds, [], [], max(0.0, left))[0] if left > 0 else []
        if not ready:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        if result_r in ready:
            chunk = os.read(result_r, 1 << 16)
            if chunk and len(result) < RESULT_CAP:
                result.extend(chunk[: RESULT_CAP - len(result)])
            elif not chunk:
                open_fds.remove(result_r)
        if pidfd in ready:
            open_fds.remove(pidfd)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - t0
    os.close(pidfd)
    os.close(result_r)
    _kill_leftovers(pid, isolated)
    stderr = _read_capped(os.path.join(folder, "stderr.txt"), 1 << 20) or b""
    line = bytes(result).strip().splitlines()[-1:] if result.strip() else []
    return {
        "result": line[0].decode(errors="replace") if line else None,
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
        "timeout": timed_out,
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "stderr": stderr.decode(errors="replace")[-TAIL:],
    }


def _kill_leftovers(pid, isolated):
    """Every process the candidate left behind. Isolated, kill(-1) reaches exactly them: the namespace's
    first process is exempt and belongs to another uid or is not signalled by kill(-1); otherwise (the
    plain subprocess backend) only the candidate's process group can be targeted."""
    for _ in range(100):
        try:
            if isolated:
                os.kill(-1, signal.SIGKILL)
            else:
                os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.001)


def main():
    stdin = sys.stdin.buffer
    isolated = bool(json.loads(stdin.readline())["isolated"])
    workdir, tmp = os.getcwd(), tempfile.gettempdir()
    known = set(os.listdir(workdir))
    tmp_known = cleanup.mount_points(tmp)  # the sandbox's own: a skeleton above a venv under the host's /tmp
    for line in stdin:  # one candidate per line, until the verifier closes our stdin
        item = json.loads(line)
        reply = _run(item, isolated, workdir)
        left = cleanup.clean(workdir, known, tmp, isolated, tmp_known)
        if left:  # fail closed: the next candidate gets a fresh worker
            reply["dirty"] = left[:5]
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
        if left:
            return


if __name__ == "__main__":
    main()
