"""The code paths for a non-root host (bwrap and unshare in a user namespace), run as uid 65534.

The test process is root here, so it re-runs a small script as `nobody` with the system Python
(the project's venv may live where nobody can read it). Skipped where that is not possible.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
REACH = (  # the job has the same uid as GNU time here: it must still reach neither its descriptors nor itself
    "import os\nfds = [f for f in os.listdir('/proc/self/fd') if int(f) > 3]\nreached = []\n"
    "for p in ('/proc/1/fd/3', '/proc/1/environ'):\n    try:\n        os.close(os.open(p, os.O_RDONLY))\n"
    "        reached.append(p)\n    except OSError:\n        pass\nprint(fds, reached)"
)
SCRIPT = """
import asyncio, json, os, sys
REACH = {reach!r}
NONROOT_ATTACKS = {attacks!r}
sys.path.insert(0, {src!r})
from tempering.sandbox import Job, Limits, Sandbox
out = {{}}
for b in Sandbox.available_backends():
    if b == "subprocess":
        continue
    sb = Sandbox(backend=b, root={root!r})
    ok = sb.run_sync(Job(cmd=["sh", "-c", "cat h.txt; echo x > out.txt; echo $HOME"], readonly_files={{"h.txt": "ro\\n"}},
                         outputs=["out.txt"]))
    loop = sb.run_sync(Job(cmd=["sh", "-c", "while :; do :; done"], limits=Limits(wall_s=1)))
    net = sb.run_sync(Job(cmd=["sh", "-c", "cat /proc/net/dev | wc -l"]))
    reach = sb.run_sync(Job(cmd=["python3", "-c", REACH]))
    out[b] = [ok.status, ok.stdout, ok.outputs.get("out.txt", b"").decode(), loop.status, net.stdout.strip(),
              reach.stdout.strip()]
    # the attacks whose escape needs a host that is not root (its folders in the job's user namespace
    # belong to the job; a cleanup that needs to open folders up)
    from tempering.sandbox import attacks
    for a in attacks.ATTACKS:
        if a.name in NONROOT_ATTACKS:
            out[b].append([a.name, attacks.why_not_run(sb, a) or asyncio.run(attacks.run_attack(sb, a))])
print(json.dumps(out))
"""
NONROOT_ATTACKS = (
    "readonly_parent",
    "plant_bind_parent",
    "plant_on_path",
    "cleanup_symlink",
    "cleanup_symlink_dirs",
    "deep_tree",
    "nested_userns",
    "nested_userns_tools",
    "forged_signal_xcpu",
)


def _as_nobody(argv, **kw):
    return subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/"},
        **kw,
    )


@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="needs root, setpriv and a system python3",
)
def test_isolated_backends_work_for_an_unprivileged_host_user():
    if _as_nobody(["test", "-r", str(SRC / "tempering" / "sandbox" / "job.py")]).returncode != 0:
        pytest.skip("the source tree is not readable by nobody here")
    root = tempfile.mkdtemp(prefix="tempering-nonroot-")  # pytest's tmp_path is private to root
    os.chmod(root, 0o777)
    try:
        res = _as_nobody(
            ["/usr/bin/python3", "-c", SCRIPT.format(src=str(SRC), root=root, reach=REACH, attacks=NONROOT_ATTACKS)],
            timeout=600,
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert res.returncode == 0, res.stderr[-2000:]
    import json

    out = json.loads(res.stdout.strip().splitlines()[-1])
    if not out:
        pytest.skip("no isolating backend works for an unprivileged user here")
    for backend, (status, stdout, written, loop, net_lines, reach, *verdicts) in out.items():
        assert (status, stdout, written, loop) == ("ok", "ro\n/job\n", "x\n", "timeout"), backend
        assert int(net_lines) <= 3, backend  # header lines + loopback only: no host interfaces
        assert reach == "[] []", (backend, reach)
        assert sorted(name for name, _ in verdicts) == sorted(NONROOT_ATTACKS), backend
        assert [v for v in verdicts if v[1]] == [], backend


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"),
    reason="needs root, setpriv and a system python3",
)
def test_cleanup_as_an_unprivileged_user_opens_up_folders_and_follows_no_link():
    """What a non-root host meets after a job: folders without permissions, holding links to its files."""
    if _as_nobody(["test", "-r", str(SRC / "tempering" / "sandbox" / "sandbox.py")]).returncode != 0:
        pytest.skip("the source tree is not readable by nobody here")
    work = tempfile.mkdtemp(prefix="tempering-nonroot-")
    os.chmod(work, 0o777)
    script = (
        f"import os, sys\nsys.path.insert(0, {str(SRC)!r})\nfrom tempering.sandbox.sandbox import _remove_tree\n"
        f"w = {work!r}\nopen(w + '/victim', 'w').close(); os.chmod(w + '/victim', 0o600)\n"
        "os.makedirs(w + '/job/a/b')\nos.symlink(w + '/victim', w + '/job/a/b/link')\n"
        "os.symlink(w + '/victim', w + '/job/a/link')\nos.chmod(w + '/job/a/b', 0)\nos.chmod(w + '/job/a', 0)\n"
        "os.mkdir(w + '/job/c')\nos.symlink(w + '/victim', w + '/job/c/link')\nos.chmod(w + '/job/c', 0o500)\n"
        "_remove_tree(w + '/job')\nprint(os.path.exists(w + '/job'), oct(os.stat(w + '/victim').st_mode & 0o777))\n"
    )
    try:
        res = _as_nobody(["/usr/bin/python3", "-c", script], timeout=60)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["False", "0o600"]
