"""The pieces behind the four containment fixes, each on its own: the status channel's authentication,
the keyring filter, the rules for read-only folders, and the descriptors a job inherits."""

import asyncio
import json
import os
import struct

import pytest

from tempering.cli import main as cli
from tempering.errors import UserError
from tempering.sandbox import Job, Sandbox, attacks
from tempering.sandbox.process import parse_status
from tempering.sandbox.seccomp import keyring_filter


def test_status_lines_count_only_with_the_nonce():
    text = "started\n1 0.00 0.00\nabc 2048 0.50 0.25\nabc started\nxyz 1 0.0 0.0\n"
    assert parse_status(text, "abc") == (True, (0.75, 2.0))
    assert parse_status("started\n1 0.00 0.00\n", "abc") == (False, None)  # a job's forgery, no nonce
    assert parse_status("x" * 5000 + "\nabc started\n", "abc") == (True, None)  # junk first does not hide it


def _bpf(prog: bytes, arch: int, nr: int) -> int:
    """Run a classic-BPF seccomp program (only the instructions keyring_filter uses) on one syscall."""
    insns = [struct.unpack("=HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    data = {0: nr, 4: arch}
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc, pc = data[k], pc + 1
        elif code == 0x15:  # jeq #k
            pc += 1 + (jt if acc == k else jf)
        elif code == 0x06:  # ret #k
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize(
    "machine, arch, blocked, allowed",
    [
        ("x86_64", 0xC000003E, [248, 249, 250, 0x40000000 | 250], [0, 1, 59, 251, 0x40000000 | 1]),
        ("x86_64", 0x40000003, [286, 287, 288], [1, 3, 285, 289]),  # i386 compat
        ("aarch64", 0xC00000B7, [217, 218, 219], [63, 64, 220, 221]),
        ("aarch64", 0x40000028, [309, 310, 311], [3, 4, 312]),  # arm compat
    ],
)
def test_keyring_filter_denies_the_keyring_calls_only(machine, arch, blocked, allowed):
    prog = keyring_filter(machine)
    eperm, allow = 0x00050000 | 1, 0x7FFF0000
    assert [_bpf(prog, arch, nr) for nr in blocked] == [eperm] * len(blocked)
    assert [_bpf(prog, arch, nr) for nr in allowed] == [allow] * len(allowed)
    assert _bpf(prog, 0x12345678, 1) == 0x00050000 | 38  # an ABI it does not know: ENOSYS
    assert keyring_filter("sparc") is None


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
    monkeypatch.setattr(attacks, "run_attack", fake_run_attack)
    monkeypatch.setattr(attacks, "Sandbox", GappySandbox)
    assert cli(["sandbox", "attacks", "--json"]) == 1  # an attack got out
    out = json.loads(capsys.readouterr().out)
    assert sorted(out) == sorted(attacks.isolated_backends()) and "subprocess" not in out
    for summary in out.values():
        assert summary == {
            "total": 3,
            "contained": 1,
            "failed": {"escaped": "it got out"},
            "not_run": {"gap": "storage: not capped in this test"},
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
    for topic in ("network", "status channel", "storage", "kernel keyring", "read-only files"):
        assert f"- {topic}:" in sub
