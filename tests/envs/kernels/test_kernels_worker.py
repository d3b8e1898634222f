"""Warm verification workers: candidates served by one worker stay apart (files, unreadable folders, POSIX
message queues, System V segments, processes), a candidate that brings its worker down is charged alone,
the cleanup follows no link, and torch.compile baselines come from the disk cache."""

import asyncio
import json
from dataclasses import replace

import pytest

from tempering.envs.kernels import KernelVerifier, VerifyConfig
from tempering.envs.kernels.hacks import RELU_PROBLEM, _sub
from tempering.envs.kernels.problems import Problem, scale_sizes
from tempering.envs.kernels.submission import parse_submission
from tempering.envs.kernels.verifier import KernelResult

RELU = _sub("        y = torch.empty_like(x)\n        self.lib.relu(x, y, x.numel())\n        return y")

# Candidates whose C kernel does what a submission's Python cannot (static checks off: any libc call), as
# it is loaded (load-time code runs before the syscall filter; the kernel calls themselves are filtered):
# the isolation between candidates must hold against native code too.
_C_FORWARD = "        y = torch.empty_like(x)\n        self.lib.{fn}(x, y, x.numel())\n        return y"
LITTER_C = r"""
#include <fcntl.h>
#include <mqueue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>
static void plant(const char* path) { FILE* f = fopen(path, "w"); if (f) { fputs("secret", f); fclose(f); } }
void litter(const float* x, float* y, long n) { for (long i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0; }
__attribute__((constructor)) static void litter_at_load(void) {
    char home[512]; snprintf(home, sizeof home, "%s/planted.py", getenv("HOME"));
    plant("/tmp/planted"); plant(home);
    mkdir("/tmp/locked", 0700); plant("/tmp/locked/secret"); chmod("/tmp/locked", 0);
    struct mq_attr attr = {0, 4, 64, 0};
    mqd_t q = mq_open("/leak", O_CREAT | O_RDWR, 0600, &attr);
    if (q != (mqd_t)-1) mq_send(q, "secret", 6, 0);
    shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
    if (fork() == 0) { setsid(); sleep(60); _exit(0); }
}
"""
CHECK_C = r"""
#include <dirent.h>
#include <fcntl.h>
#include <mqueue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static long parent_of(long pid) {
    char path[64], buf[512]; snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE* f = fopen(path, "r"); if (!f) return -1;
    size_t k = fread(buf, 1, sizeof buf - 1, f); fclose(f); buf[k] = 0;
    char* p = strrchr(buf, ')'); long ppid = -1; if (p) sscanf(p + 2, "%*c %ld", &ppid); return ppid;
}
static int leaks(void) {
    int n = 0; char home[512]; snprintf(home, sizeof home, "%s/planted.py", getenv("HOME"));
    n += access("/tmp/planted", F_OK) == 0; n += access(home, F_OK) == 0; n += access("/tmp/locked", F_OK) == 0;
    n += mq_open("/leak", O_RDONLY) != (mqd_t)-1;
    FILE* f = fopen("/proc/sysvipc/shm", "r"); char line[512]; int lines = 0;
    if (f) { while (fgets(line, sizeof line, f)) lines++; fclose(f); } n += lines > 1;
    long mine[16] = {1}; int m = 1;  /* itself and its ancestors (the sandbox's own processes among them) */
    for (long p = getpid(); p > 1 && m < 16; p = parent_of(p)) mine[m++] = p;
    DIR* d = opendir("/proc"); struct dirent* e;
    while (d && (e = readdir(d))) { long pid = atol(e->d_name); int known = 0;
        for (int k = 0; k < m; k++) known |= pid == mine[k]; n += pid > 0 && !known; }
    if (d) closedir(d);
    return n;
}
static int bad;
__attribute__((constructor)) static void check_at_load(void) { bad = leaks(); }
void check(const float* x, float* y, long n) {  /* zeros (an incorrect answer) if anything leaked */
    for (long i = 0; i < n; i++) y[i] = bad ? 0 : (x[i] > 0 ? x[i] : 0);
}
"""
KILL_C = r"""
#include <signal.h>
void kill_all(const float* x, float* y, long n) { }
__attribute__((constructor)) static void kill_at_load(void) { kill(-1, SIGKILL); }  /* every process it can signal */
"""
LITTER = _sub(_C_FORWARD.format(fn="litter"), c=LITTER_C)
CHECK = _sub(_C_FORWARD.format(fn="check"), c=CHECK_C)
KILL = _sub(_C_FORWARD.format(fn="kill_all"), c=KILL_C)


@pytest.fixture
def verifier(kernel_verifier):
    if not kernel_verifier.sandbox.isolated:
        pytest.skip("the isolation between candidates is the isolated backends' (a PID namespace per job)")
    return KernelVerifier(
        replace(kernel_verifier.config, static_checks=False),
        sandbox=kernel_verifier.sandbox,
        cache=kernel_verifier.cache,
    )


@pytest.mark.slow
def test_candidates_served_by_one_worker_see_nothing_of_each_other(verifier):
    from tempering.sandbox import Sandbox

    one = KernelVerifier(
        verifier.config, sandbox=Sandbox(image="host", concurrency=1), cache=verifier.cache
    )  # one worker
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)

    async def go():
        subs = [parse_submission(t) for t in (LITTER, CHECK, KILL, RELU)]
        res = KernelResult(problem=problem.name, backend="c", status="")
        artifacts = [await one._compile(sub, res) for sub in subs]
        # queued in this order, served in this order
        return await asyncio.gather(
            *(one._harness(problem, s, a, "verify", False, "c") for s, a in zip(subs, artifacts))
        )

    litter, check, kill, after = asyncio.run(go())
    assert litter["status"] == "correct", litter
    assert not litter.get("_left_behind"), litter["_left_behind"]  # its worker removed everything it made
    assert check["status"] == "correct", check.get("message")  # no file, folder, queue, segment or process
    assert kill["status"] == "crashed" and "worker died" in kill["message"], kill
    assert after["status"] == "correct", after  # served by the worker that took over


@pytest.mark.slow
def test_a_candidate_that_kills_its_worker_is_charged_alone(verifier):
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)

    async def go():
        return await asyncio.gather(*(verifier.verify(problem, t, mode="verify") for t in (RELU, KILL, RELU)))

    first, killer, last = asyncio.run(go())
    assert killer.status == "crashed"
    assert first.correct and last.correct, (first.message, last.message)


def test_cleanup_removes_unreadable_folders_and_follows_no_link(tmp_path):
    from tempering.envs.kernels.harness import cleanup

    work, tmp, outside = tmp_path / "work", tmp_path / "tmp", tmp_path / "outside"
    for d in (work, tmp, outside):
        d.mkdir()
    (work / "verify.py").write_text("harness")
    secret = outside / "secret"
    secret.write_text("x")
    secret.chmod(0o600)
    locked = tmp / "locked" / "deeper"
    locked.mkdir(parents=True)
    (locked / "secret").write_text("x")
    (tmp / "locked" / "link").symlink_to(secret)
    (work / "link").symlink_to(outside)
    locked.chmod(0)
    (tmp / "locked").chmod(0)
    left = cleanup.clean(str(work), {"verify.py"}, str(tmp), isolated=False)
    assert left == [] and list(tmp.iterdir()) == [] and [p.name for p in work.iterdir()] == ["verify.py"]
    assert secret.read_text() == "x" and secret.stat().st_mode & 0o777 == 0o600  # the link was not followed
    assert outside.is_dir()


def test_baselines_are_kept_on_disk_per_problem_sizes_and_machine(tmp_path, monkeypatch):
    from tempering.sandbox import Sandbox

    v = KernelVerifier(VerifyConfig(cache_dir=str(tmp_path)), sandbox=Sandbox(backend="subprocess"))
    problem = Problem(name="rand_relu", source=RELU_PROBLEM)
    stored = {"eager_ms": 2.0, "compile_ms": 1.5, "status": "baseline"}
    v.baseline_dir.mkdir(parents=True)
    (v.baseline_dir / f"{v._baseline_key(problem)}.json").write_text(json.dumps(stored))

    async def no_job(*args, **kwargs):
        raise AssertionError("a baseline job ran although the baseline is on disk")

    monkeypatch.setattr(v, "_job", no_job)
    assert asyncio.run(v.baseline(problem)) == stored
    smaller = Problem(name="rand_relu", source=scale_sizes(RELU_PROBLEM, 0.5))
    assert v._baseline_key(smaller) != v._baseline_key(problem)  # sizes are part of the key
    other = KernelVerifier(VerifyConfig(cache_dir=str(tmp_path), threads=2), sandbox=v.sandbox)
    assert other._baseline_key(problem) != v._baseline_key(problem)
    assert KernelVerifier(VerifyConfig(cache_dir=str(tmp_path)), sandbox=v.sandbox)._baseline_key(problem) == (
        v._baseline_key(problem)
    )


def test_mount_points_below_a_folder_are_the_sandboxs_own():
    from tempering.envs.kernels.harness import cleanup

    assert "proc" in cleanup.mount_points("/")  # /proc is a mount point in every namespace
