"""What a job sees and what comes back, on every backend available here."""

import ast
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tempering.errors import UserError
from tempering.sandbox import Job, Limits, Sandbox, backends


def run(backend, **job):
    return Sandbox(backend=backend).run_sync(Job(**job))


def test_ok_job_returns_output_files_and_usage(backend):
    res = run(
        backend,
        cmd=["python3", "main.py"],
        outputs=["out/result.json", "missing.txt"],
        files={
            "main.py": "import os\nos.makedirs('out')\nopen('out/result.json','w').write('{\"x\": 1}')\n"
            "print('hello'); import sys; print('warn', file=sys.stderr)"
        },
    )
    assert res.status == "ok" and res.exit_code == 0 and res.signal is None
    assert res.stdout == "hello\n" and res.stderr == "warn\n"
    assert res.outputs == {"out/result.json": b'{"x": 1}'}
    assert 0 < res.wall_s < 30 and res.cpu_s >= 0
    assert 1 < res.peak_memory_mb < 200  # a Python interpreter, not this test process


def test_nonzero_exit_and_crash_by_signal(backend):
    res = run(backend, cmd=["sh", "-c", "echo out; exit 3"])
    assert (res.status, res.exit_code, res.signal, res.stdout) == ("nonzero_exit", 3, None, "out\n")
    res = run(backend, cmd=["python3", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"])
    assert (res.status, res.exit_code, res.signal) == ("killed", None, signal.SIGSEGV)


@pytest.mark.parametrize(
    "code, limits, status",
    [
        ("import time; time.sleep(30)", Limits(wall_s=1.0), "timeout"),
        ("print('y' * 10000)", Limits(output_bytes=4096), "output_limit"),
        ("open('big', 'wb').write(b'x' * (12 << 20))", Limits(fsize_mb=8), "output_limit"),
        (
            "import os\nfor i in range(200):\n    open(f'f{i}', 'w').close()\nimport time; time.sleep(5)",
            Limits(inodes=100),
            "output_limit",
        ),
    ],
    ids=["wall", "output", "file_size", "inodes"],
)
def test_limits_end_a_job(backend, code, limits, status):
    """The limits every backend keeps, the host's plain `subprocess` one included (the adversarial suite
    tries them harder, in the isolating backends only)."""
    res = run(backend, cmd=["python3", "-c", code], limits=limits)
    assert res.status == status, (res.status, res.message, res.stderr[-300:])
    assert len(res.stdout) <= limits.output_bytes


def test_an_allocation_past_memory_mb_fails_inside_the_job(backend):
    """RLIMIT_AS makes the allocation fail; what the job does then is its own (here: MemoryError, exit 1).
    Its stderr is not the host's evidence, so the status stays the job's, with a hint in the message."""
    res = run(backend, cmd=["python3", "-c", "b = bytearray(400 << 20)"], limits=Limits(memory_mb=128))
    assert (res.status, res.exit_code) == ("nonzero_exit", 1), (res.status, res.message)
    assert "memory_mb=128" in res.message and "MemoryError" in res.stderr


def test_memory_past_the_cgroup_is_memory_exceeded(isolated):
    sb = Sandbox(backend=isolated)
    if any(g.startswith("storage:") for g in sb.not_contained):
        pytest.skip("no memory cgroup here")
    code = "import os\nfds = [os.memfd_create('m') for _ in range(8)]\nfor fd in fds:\n    os.write(fd, b'x' * (32 << 20))\n"
    res = sb.run_sync(Job(cmd=["python3", "-c", code], limits=Limits(memory_mb=128, disk_mb=32)))
    assert res.status == "memory_exceeded", (res.status, res.message)


def test_a_held_up_loop_does_not_turn_a_finished_job_into_a_timeout(backend):
    """The host's timer counts only if the tree still ran when it fired: here the event loop is held up
    past both the job's end and its wall-clock limit, and both are due when it runs again."""
    sb = Sandbox(backend=backend)

    async def main():
        task = asyncio.ensure_future(sb.run(Job(cmd=["sleep", "0.2"], limits=Limits(wall_s=1.0))))
        await asyncio.sleep(0.1)
        time.sleep(2.0)
        return await task

    res = asyncio.run(main())
    assert res.status == "ok", (res.status, res.message)


def test_job_folders_are_removed_off_the_event_loop(backend, monkeypatch):
    from tempering.sandbox import sandbox as sandbox_module

    real = sandbox_module._remove_tree

    def slow(path):  # as a hundred thousand files take
        time.sleep(1.5)
        real(path)

    monkeypatch.setattr(sandbox_module, "_remove_tree", slow)
    sb = Sandbox(backend=backend)
    gaps = []

    async def main():
        stop = asyncio.Event()

        async def tick():
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                gaps.append(time.monotonic() - last)
                last = time.monotonic()

        ticker = asyncio.ensure_future(tick())
        many = "for i in range(1500):\n    open(f'f{i}', 'w').close()\n"  # more than the loop removes itself
        res = await sb.run(Job(cmd=["python3", "-c", many]))
        stop.set()
        await ticker
        return res

    assert asyncio.run(main()).ok
    assert max(gaps) < 0.5, max(gaps)


@pytest.mark.slow  # imports torch
def test_stdin_env_and_project_interpreter(backend):
    # torch is the host's (kernel jobs' image): the RAM image holds only pytest and numpy of the venv
    res = Sandbox(backend=backend, image="host").run_sync(
        Job(
            cmd=[
                "python3",
                "-c",
                "import os, sys, torch; print(sys.stdin.read(), os.environ['MY_VAR'], sys.executable, sorted(os.environ))",
            ],
            stdin="from stdin",
            env={"MY_VAR": "v1", "OMP_NUM_THREADS": "1"},
            limits=Limits(memory_mb=8192, wall_s=60),
        )
    )
    assert res.status == "ok", res.stderr
    assert res.stdout.startswith("from stdin v1 ")
    assert sys.executable in res.stdout
    assert "OMP_NUM_THREADS" in res.stdout and "HOSTNAME" not in res.stdout


def test_readonly_files_can_be_read_not_changed(backend):
    code = (
        "import os\nprint(open('h/harness.py').read())\n"
        "for act in (lambda: open('h/harness.py', 'w').write('hacked'), lambda: os.remove('h/harness.py'),\n"
        "            lambda: os.rename('h/harness.py', 'h/x.py')):\n"
        "    try:\n        act(); print('CHANGED')\n    except OSError:\n        print('denied')\n"
    )
    res = run(backend, cmd=["python3", "main.py"], files={"main.py": code}, readonly_files={"h/harness.py": "X = 1"})
    assert res.stdout.startswith("X = 1\n"), res.stderr
    if backend != "subprocess" or os.geteuid() != 0:  # root ignores file modes: only the isolated backends hold
        assert "CHANGED" not in res.stdout


def test_ro_binds_are_visible_read_only(isolated, tmp_path):
    data = tmp_path / "lib.txt"
    data.write_text("built artifact")
    data.chmod(0o644)
    tmp_path.chmod(0o755)
    code = (
        f"print(open({str(data)!r}).read())\ntry:\n    open({str(data)!r}, 'w').write('x'); print('CHANGED')\n"
        "except OSError:\n    print('denied')\n"
    )
    res = run(isolated, cmd=["python3", "-c", code], ro_binds=[str(data)])
    assert res.stdout == "built artifact\ndenied\n", res.stderr
    assert data.read_text() == "built artifact"


def test_isolated_job_sees_only_its_workdir_and_no_host_tmp(isolated, tmp_path):
    (tmp_path / "host-file").write_text("x")
    with tempfile.NamedTemporaryFile(dir="/tmp", prefix="tempering-host-") as marker:
        code = (
            f"import os\nprint(os.getcwd(), os.path.exists({str(tmp_path)!r}), repr(os.listdir('/tmp')), os.getuid())"
        )
        res = run(isolated, cmd=["python3", "-c", code])
    cwd, exists, rest = res.stdout.split(" ", 2)
    assert (cwd, exists) == (backends.INNER_WORKDIR, "False")
    seen = ast.literal_eval(rest.rsplit(" ", 1)[0])
    # the job's /tmp is its own: only mount points of read-only binds (an interpreter installed under /tmp)
    bound = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}
    allowed = {b.relative_to("/tmp").parts[0] for b in bound if b.is_relative_to("/tmp")}
    assert Path(marker.name).name not in seen and set(seen) <= allowed, seen
    if os.geteuid() == 0:
        assert int(rest.split()[-1]) != 0  # not root


def test_setup_failure_is_a_sandbox_error(isolated, monkeypatch):
    real = getattr(backends, f"{isolated}_argv")

    def broken(lay, cmd, *rest, **kw):
        argv = real(lay, cmd, *rest, **kw)
        return argv[:1] + ["--no-such-option"] + argv[1:]

    monkeypatch.setattr(backends, f"{isolated}_argv", broken)
    res = run(isolated, cmd=["true"])
    assert res.status == "sandbox_error" and isolated in res.message


def test_job_cannot_fake_a_sandbox_error(isolated):
    res = run(isolated, cmd=["sh", "-c", "echo 'bwrap: setup failed' >&2; exit 1"])
    assert res.status == "nonzero_exit"


def test_pool_bounds_running_and_waiting_jobs(backend):
    sb = Sandbox(backend=backend, concurrency=1, queue_size=1)
    seen = []

    async def main():
        job = Job(cmd=["sleep", "0.5"])
        tasks = [asyncio.ensure_future(sb.run(job)) for _ in range(3)]
        await asyncio.sleep(0.25)
        seen.append((sb.running, sb.waiting))  # one runs, one waits, the third is held back in run()
        results = await asyncio.gather(*tasks)
        seen.append((sb.running, sb.waiting))
        return results

    results = asyncio.run(main())
    assert seen == [(1, 1), (0, 0)]
    assert [r.status for r in results] == ["ok"] * 3


def test_concurrent_jobs_overlap(backend):
    sb = Sandbox(backend=backend, concurrency=4)

    async def main():
        return await asyncio.gather(*[sb.run(Job(cmd=["sleep", "0.5"])) for _ in range(4)])

    loop_t = asyncio.run(asyncio.wait_for(main(), 30))
    assert all(r.ok for r in loop_t)


def test_cancelled_run_kills_the_job_and_cleans_up(backend, tmp_path):
    sb = Sandbox(backend=backend, root=str(tmp_path))

    async def main():
        task = asyncio.ensure_future(sb.run(Job(cmd=["sleep", "30"])))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    root = next(tmp_path.iterdir())
    assert [p for p in root.iterdir() if p.name.startswith("job-")] == []  # the job folder is gone


def test_devices_are_passed_through_only_when_asked(isolated):
    dev = next((d for d in ("/dev/fuse", "/dev/kvm", "/dev/vsock", "/dev/loop-control") if os.path.exists(d)), None)
    if dev is None:
        pytest.skip("no spare device node on this host")
    if isolated == "gvisor":  # its application kernel has no host devices: said before anything runs
        with pytest.raises(UserError, match="Job.devices: gVisor"):
            run(isolated, cmd=["true"], devices=[dev])
        return
    code = f"import os, stat\ntry:\n    print(stat.S_ISCHR(os.stat({dev!r}).st_mode))\nexcept OSError:\n    print('absent')"
    assert run(isolated, cmd=["python3", "-c", code], devices=[dev]).stdout == "True\n"
    assert run(isolated, cmd=["python3", "-c", code]).stdout == "absent\n"


def test_devices_must_be_device_nodes():
    from tempering.errors import UserError

    for bad in ("/etc/passwd", "/dev/no-such-device", "relative"):
        with pytest.raises(UserError, match="Job.devices"):
            Job(cmd=["true"], devices=[bad]).validate()


def test_a_job_can_be_fed_and_read_while_it_runs(backend):
    """A warm worker's channel: stdin fed as the job runs, stdout handed over as it comes."""
    sb = Sandbox(backend=backend)
    code = "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\n"

    async def main():
        to_send, seen = asyncio.Queue(), []

        async def feed():
            while (chunk := await to_send.get()) is not None:
                yield chunk

        def on_stdout(chunk):
            seen.append(chunk)
            to_send.put_nowait(b"two\n" if len(seen) == 1 else None)  # answer, then end its stdin

        to_send.put_nowait(b"one\n")
        res = await asyncio.wait_for(sb.run(Job(cmd=["python3", "-c", code]), feed=feed(), on_stdout=on_stdout), 60)
        return res, b"".join(seen)

    res, seen = asyncio.run(main())
    assert res.status == "ok" and res.stdout == "" and seen == b"got one\ngot two\n"
    from tempering.errors import UserError

    with pytest.raises(UserError, match="feed"):
        asyncio.run(sb.run(Job(cmd=["true"], stdin="x"), feed=_empty()))


async def _empty():
    return
    yield


def test_mounts_show_workdir_folders_at_fixed_paths(isolated):
    code = (
        "import os\nopen('/app/made.txt', 'w').write('by job')\nprint(open('/tests/t.sh').read(), os.getcwd())\n"
        "print(sorted(os.listdir('/app')), open('/logs/verifier/in.txt').read())\n"
        "open('/logs/verifier/reward.txt', 'w').write('1')\n"
        "try:\n    open('/tests/t.sh', 'w').write('hacked'); print('CHANGED')\nexcept OSError:\n    print('denied')\n"
    )
    res = run(
        isolated,
        cmd=["python3", "-c", code],
        files={"app/data.csv": "a,b\n", "logs/in.txt": "log"},
        readonly_files={"tests/t.sh": "echo ok"},
        mounts={"/app": "app", "/tests": "tests", "/logs/verifier": "logs"},
        outputs=["app/made.txt", "logs/reward.txt"],
    )
    assert res.stdout == f"echo ok {backends.INNER_WORKDIR}\n['data.csv', 'made.txt'] log\ndenied\n", res.stderr
    assert res.outputs == {"app/made.txt": b"by job", "logs/reward.txt": b"1"}


def test_mounts_need_isolation_and_a_free_path():
    from tempering.errors import UserError

    with pytest.raises(UserError, match="needs an isolating backend"):
        run("subprocess", cmd=["true"], mounts={"/app": "app"})
    for bad, why in [("/usr/app", "cover /usr"), ("app", "absolute"), ("/", "absolute"), ("/job", "cover /job")]:
        with pytest.raises(UserError, match=why):
            Job(cmd=["true"], mounts={bad: "x"}).validate()
    with pytest.raises(UserError, match="lies inside"):
        Job(cmd=["true"], mounts={"/logs": "a", "/logs/verifier": "b"}).validate()


async def _beside(sb, server: str, client: str, network, seen: list[bytes] | None = None):
    """Run `client` while `server` (a Python program that prints once it serves) runs with a `Network`;
    `network(net)`: the async context giving the client's network (or the net itself)."""
    from tempering.sandbox.sandbox import Network

    net, up = Network(), asyncio.Event()
    job = Job(cmd=["python3", "-c", server], limits=Limits(wall_s=60))
    out = seen if seen is not None else []
    serving = asyncio.ensure_future(sb.run(job, network=net, on_stdout=lambda b: (out.append(b), up.set())))
    await asyncio.wait_for(up.wait(), 60)
    try:
        async with network(net) as client_net:
            return await sb.run(Job(cmd=["python3", "-c", client]), network=client_net)
    finally:
        serving.cancel()
        try:
            await serving
        except asyncio.CancelledError:
            pass
        net.close()


def test_jobs_given_one_network_share_it_and_nothing_else():
    """A server one job leaves running answers another job over 127.0.0.1; the second job sees none of the
    first's processes or files, and runs on the first one's slot (a pool of one slot does not deadlock)."""
    from tempering.sandbox.sandbox import Network

    sb = Sandbox(backend=Sandbox.available_backends()[0], concurrency=1)
    if not sb.shares_network:
        with pytest.raises(UserError, match="shared network needs the bwrap or unshare backend on a root host"):
            asyncio.run(sb.run(Job(cmd=["true"]), network=Network()))
        return
    server = (
        "import http.server, socketserver\nopen('mine.txt', 'w').write('x')\n"
        "class H(http.server.BaseHTTPRequestHandler):\n    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers(); self.wfile.write(b'pong')\n"
        "    def log_message(self, *a):\n        pass\n"
        "srv = socketserver.TCPServer(('127.0.0.1', 8765), H)\nprint('up', flush=True)\nsrv.serve_forever()\n"
    )
    client = (
        "import os, urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:8765').read().decode(),"
        " os.path.exists('mine.txt'), len([p for p in os.listdir('/proc') if p.isdigit()]))"
    )

    joined = asyncio.run(_beside(sb, server, client, contextlib.nullcontext))
    pong, sees_files, processes = joined.stdout.split()
    assert (pong, sees_files) == ("pong", "False"), joined.stderr  # the server's answer; not its files
    assert int(processes) <= 3  # its own: GNU time, the supervisor, itself


def test_a_bridge_forwards_only_its_ports_and_only_one_way():
    """A job run through a `Bridge` reaches the named port of another job's network and no other; a port it
    binds itself is its own, even one the other job holds; the other job reaches nothing of the bridged one."""
    from tempering.sandbox.sandbox import Bridge

    sb = Sandbox(backend=Sandbox.available_backends()[0], concurrency=1)
    if not sb.shares_network:
        pytest.skip("a bridge joins jobs' networks: bwrap on a root host")
    server = (
        "import socket, sys, threading, time\n"
        "def serve(port, answer):\n    s = socket.create_server(('127.0.0.1', port))\n    while True:\n"
        "        c, _ = s.accept(); c.sendall(answer); c.close()\n"
        "for port, answer in ((8765, b'fwd'), (8766, b'theirs')):\n"
        "    threading.Thread(target=serve, args=(port, answer), daemon=True).start()\n"
        "time.sleep(0.5); print('up', flush=True)\n"
        "while True:\n    time.sleep(0.2)\n    try:\n        socket.create_connection(('127.0.0.1', 8767), 1)\n"
        "        print('REACHED', flush=True)\n    except OSError:\n        pass\n"
    )
    client = (
        "import socket, time\nmine = socket.create_server(('127.0.0.1', 8766))\n"
        "own = socket.create_server(('127.0.0.1', 8767))\n"
        "got = socket.create_connection(('127.0.0.1', 8765), 5).recv(10).decode()\n"
        "try:\n    socket.create_connection(('127.0.0.1', 8768), 1)\n    other = 'reached'\n"
        "except OSError:\n    other = 'refused'\ntime.sleep(1)\nprint(got, other)\n"
    )
    seen: list[bytes] = []

    @contextlib.asynccontextmanager
    async def bridged(net):
        bridge = Bridge(net, [8765])
        try:
            yield await bridge.open()
        finally:
            await bridge.close()

    res = asyncio.run(_beside(sb, server, client, bridged, seen))
    assert res.stdout.split() == ["fwd", "refused"], res.stderr
    assert b"REACHED" not in b"".join(seen)


def test_a_job_sees_neither_the_hosts_cgroup_path_nor_its_pid(isolated):
    """The job's cgroup is the root of its own cgroup namespace: /proc/self/cgroup names no host path (the
    host's per-job cgroups carry the host process's pid)."""
    res = run(isolated, cmd=["cat", "/proc/self/cgroup"])
    assert res.status == "ok"
    assert all(line.rsplit(":", 1)[-1] == "/" for line in res.stdout.splitlines()), res.stdout
    assert str(os.getpid()) not in res.stdout
