"""The pieces behind the containment fixes, each on its own: the status channel's authentication, the
seccomp filter, the rules for read-only folders, the descriptors a job inherits."""

import asyncio
import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

from tempering.cli import main as cli
from tempering.errors import UserError
from tempering.sandbox import Job, Limits, Sandbox, attacks
from tempering.sandbox.process import parse_status


def test_status_lines_count_only_with_the_nonce():
    text = "started\n1 0.00 0.00 0\nabc 2048 0.50 0.25 3\nabc started\nxyz 1 0.0 0.0 0\n"
    rep = parse_status(text, "abc")
    assert (rep.started, rep.measured, rep.cpu_s, rep.peak_mb, rep.exit_code, rep.term_signal) == (
        True,
        True,
        0.75,
        2.0,
        3,
        None,
    )
    forged = parse_status("started\n1 0.00 0.00 0\n", "abc")  # a job's forgery, no nonce
    assert not forged.started and not forged.measured
    junk = parse_status("x" * 5000 + "\nabc started\n", "abc")  # junk first does not hide it
    assert junk.started and not junk.measured


def test_a_signal_is_what_gnu_time_says_not_an_exit_code_past_128():
    signalled = parse_status("Command terminated by signal 24\nabc 2048 1.0 0.0 0\n", "abc")
    assert (signalled.exit_code, signalled.term_signal) == (None, 24)
    exited = parse_status("Command exited with non-zero status 152\nabc 2048 0.0 0.0 152\n", "abc")
    assert (exited.exit_code, exited.term_signal) == (152, None)


def test_folders_of_read_only_files_take_no_job_files_and_time_is_reserved():
    ro = {"tests/unit/check.py": "x"}
    Job(cmd=["true"], files={"main.py": "", "testsuite/a.py": ""}, readonly_files=ro, outputs=["out.txt"]).validate()
    with pytest.raises(UserError, match="'tests/extra.py' lies in 'tests', a folder of read-only files"):
        Job(cmd=["true"], files={"tests/extra.py": ""}, readonly_files=ro).validate()
    with pytest.raises(UserError, match="Job.outputs path 'tests/unit/report.txt'"):
        Job(cmd=["true"], readonly_files=ro, outputs=["tests/unit/report.txt"]).validate()
    Job(cmd=["true"], files={"tests.py": ""}, readonly_files={"judge.py": "x"}).validate()  # top-level: no folder
    with pytest.raises(UserError, match="TIME"):
        Job(cmd=["true"], env={"TIME": "%e"}).validate()


def test_isolated_job_inherits_no_descriptor_above_2(isolated):
    leak = os.open(os.devnull, os.O_RDONLY)
    os.set_inheritable(leak, True)  # as a library or the caller's shell might leave one
    try:
        code = "import os; print(sorted(int(f) for f in os.listdir('/proc/self/fd')))"
        res = Sandbox(backend=isolated).run_sync(Job(cmd=["python3", "-c", code]))
    finally:
        os.close(leak)
    assert res.status == "ok" and res.stdout == "[0, 1, 2, 3]\n", res.stderr  # 3: the listing itself
    assert res.peak_memory_mb > 2  # GNU time still reported


def test_attacks_json_counts_every_attack_on_the_isolating_backends_only(monkeypatch, capsys):
    """What benchmarks/faults.py reads: {backend: {total, contained, ...}} for each isolating backend;
    an attack a backend cannot contain on this machine is not run and not counted as contained."""
    if not attacks.isolated_backends():
        pytest.skip("no isolating backend here")
    fakes = [
        attacks.Attack("held", "contained", "", lambda r, c: ""),
        attacks.Attack("escaped", "got out", "", lambda r, c: "it got out"),
        attacks.Attack("gap", "needs what this machine lacks", "", lambda r, c: "", needs="storage"),
    ]
    attacked = []

    async def fake_run_attack(sandbox, attack):  # records where it would run; runs nothing
        attacked.append((sandbox.backend, attack.name))
        return attack.check(None, None)

    class GappySandbox(Sandbox):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.not_contained.append("storage: not capped in this test")

    monkeypatch.setattr(attacks, "ATTACKS", fakes)
    monkeypatch.setattr(attacks, "PATH_SUITES", ())
    monkeypatch.setattr(attacks, "run_attack", fake_run_attack)
    monkeypatch.setattr(attacks, "Sandbox", GappySandbox)
    assert cli(["sandbox", "attacks", "--json", "--path", "job API"]) == 1  # an attack got out
    out = json.loads(capsys.readouterr().out)
    assert sorted(out) == sorted(attacks.isolated_backends()) and "subprocess" not in out
    for summary in out.values():
        assert {k: v for k, v in summary.items() if k != "cases"} == {
            "total": 3,
            "contained": 1,
            "failed": {"job API / escaped / escaped": "it got out"},
            "not_run": {"job API / gap / gap": "storage: not capped in this test"},
        }
    assert {b for b, _ in attacked} == set(out) and "gap" not in {name for _, name in attacked}


def test_attacks_never_run_on_the_host(tmp_path, capsys, monkeypatch):
    trace = tmp_path / "ran"
    attack = attacks.Attack("trace", "leaves a file", f"open({str(trace)!r}, 'w').write('x')\n", lambda r, c: "")
    with pytest.raises(UserError, match="does not isolate"):
        asyncio.run(attacks.run_attack(Sandbox(backend="subprocess"), attack))
    with pytest.raises(UserError, match="does not isolate"):
        asyncio.run(attacks.run_suite("subprocess"))
    assert not trace.exists()
    assert cli(["sandbox", "attacks", "--json", "subprocess"]) == 2
    assert "does not isolate" in capsys.readouterr().err
    monkeypatch.setattr(attacks, "isolated_backends", lambda: [])
    assert cli(["sandbox", "attacks", "--json"]) == 2
    assert "no isolating backend works here" in capsys.readouterr().err


def test_subprocess_backend_says_what_it_does_not_contain(capsys):
    assert cli(["sandbox", "backends"]) == 0
    out = capsys.readouterr().out
    sub = out[out.index("subprocess") :]
    assert "does NOT contain" in sub
    for topic in (
        "network",
        "status channel",
        "storage",
        "usage",
        "kernel keyring",
        "user namespaces",
        "shared files",
        "read-only files",
    ):
        assert f"- {topic}:" in sub


def _exit(**kw):
    from tempering.sandbox.process import Exit, Report

    report = kw.pop("report", Report(started=True, measured=True, exit_code=0))
    base = dict(exit_code=0, term_signal=None, stdout=b"", stderr=b"", stdout_truncated=False, stderr_truncated=False)
    return Exit(**(base | dict(wall_s=0.1, tree_cpu_s=0.0, report=report) | kw))


def test_limit_statuses_rest_on_the_hosts_evidence_only():
    from tempering.sandbox.process import Report

    sb = Sandbox(backend=Sandbox.available_backends()[0])
    job = Job(cmd=["true"], limits=Limits(cpu_s=2.0, fsize_mb=8))
    classify = lambda **kw: sb._classify(
        job, _exit(**{k: v for k, v in kw.items() if k not in ("oom", "cpu")}), kw.get("oom", False), kw.get("cpu")
    )
    rep = lambda **kw: Report(started=True, measured=True, **kw)
    # the job's words and exit codes: never a limit
    forged = classify(report=rep(exit_code=152), stderr=b"MemoryError\nFile too large\n", exit_code=152)
    assert (forged.status, forged.exit_code, forged.signal) == ("nonzero_exit", 152, None)
    assert "failed allocation" in forged.message  # a hint, in words
    assert classify(report=rep(term_signal=signal.SIGXCPU), cpu=0.1).status == "killed"
    assert classify(report=rep(term_signal=signal.SIGXFSZ)).status == "killed"
    # the host's evidence: the CPU it measured, its timer, its byte and file counts, the cgroup's OOM kill
    assert classify(report=rep(term_signal=signal.SIGXCPU), cpu=2.0).status == "timeout"
    assert classify(report=rep(term_signal=signal.SIGKILL), cpu=3.1).status == "timeout"
    # the limit that fired, as a loaded machine counts it: the cgroup a tick behind, or GNU time's count
    assert classify(report=rep(term_signal=signal.SIGXCPU), cpu=1.89).status == "timeout"
    assert classify(report=rep(term_signal=signal.SIGXCPU, cpu_s=2.0), cpu=1.5).status == "timeout"
    assert classify(report=rep(term_signal=signal.SIGXCPU, cpu_s=0.2), cpu=0.3).status == "killed"
    assert classify(kill_reason="timeout").status == "timeout"
    assert classify(kill_reason="inodes").status == "output_limit"
    assert classify(stdout_truncated=True).status == "output_limit"
    assert classify(report=rep(term_signal=signal.SIGKILL), oom=True).status == "memory_exceeded"
    # without GNU time's report an exit code of 128 + N stays an exit code
    bare = classify(report=Report(started=True), exit_code=152, cpu=5.0)
    assert (bare.status, bare.exit_code, bare.signal) == ("nonzero_exit", 152, None)


def test_removal_follows_no_link_and_goes_any_depth(tmp_path):
    from tempering.sandbox.sandbox import _remove_tree

    victim = tmp_path / "victim.txt"
    victim.write_text("host")
    victim.chmod(0o600)
    root = tmp_path / "job"
    (root / "locked").mkdir(parents=True)
    (root / "locked" / "link").symlink_to(victim)
    (root / "dirlink").symlink_to(tmp_path)
    deep = os.open(root, os.O_RDONLY)
    for _ in range(3000):  # deeper than rmtree's recursion and than a path can name
        os.mkdir("d", dir_fd=deep)
        nxt = os.open("d", os.O_RDONLY, dir_fd=deep)
        os.close(deep)
        deep = nxt
    os.close(deep)
    (root / "locked").chmod(0)
    _remove_tree(str(root))
    assert not root.exists()
    assert victim.read_text() == "host" and (victim.stat().st_mode & 0o777) == 0o600


def test_bwrap_root_is_read_only_and_binds_below_tmp_sit_in_a_read_only_skeleton(tmp_path):
    from tempering.sandbox import backends

    tool = Path(tempfile.mkdtemp(prefix="tempering-test-", dir="/tmp"))
    try:
        (tool / "bin").mkdir()
        lay = backends.Layout(
            jobroot=str(tmp_path),
            workdir=str(tmp_path / "work"),
            tmpdir=str(tmp_path / "tmp"),
            ro_binds=[str(tool / "bin")],
        )
        argv = backends.bwrap_argv(lay, ["true"])
        argv = argv[: argv.index("--")]
        mounts = [i for i, a in enumerate(argv) if a in ("--bind", "--ro-bind", "--dev-bind", "--dir", "--symlink")]
        assert argv[max(mounts) + 3 :].count("--remount-ro") == 1 and argv[argv.index("--remount-ro") + 1] == "/"
        # the folder just below /tmp is a read-only mount of host-made folders; the real bind goes in after it
        skeleton = argv.index(str(tool))
        assert argv[skeleton - 2] == "--ro-bind" and (Path(argv[skeleton - 1]) / "bin").is_dir()
        assert argv.index(str(tool / "bin")) > skeleton
        assert ["--dir", str(tool)] not in [argv[i : i + 2] for i in range(len(argv))]  # not made in the job's /tmp
        if backends.bwrap_disables_userns():
            assert "--disable-userns" in argv  # this layout has no uid: bwrap makes the user namespace
    finally:
        shutil.rmtree(tool)
