"""The one-way bridge from a job's own network namespace to the services of another (`sandbox.Bridge`).

Run by the host as root with `python -I -S forward.py NSFD PORT...` (standard library only): it makes a
fresh network namespace with loopback up and listens on 127.0.0.1:PORT there for each port, prints
`bound` and waits for a line on stdin (the host takes its handle on the namespace meanwhile). Then it
enters the namespace held open on descriptor NSFD, drops to an unprivileged uid and relays each
connection it accepts to the same port there. Nothing there can connect back: the only sockets in the
first namespace are these listeners.
"""

import ctypes
import encodings.idna  # noqa: F401  (socket names are encoded with it: imported before the uid drops)
import fcntl
import os
import socket
import struct
import sys
import threading

CLONE_NEWNET = 0x40000000
SIOCSIFFLAGS = 0x8914
IFF_UP, IFF_LOOPBACK, IFF_RUNNING = 0x1, 0x8, 0x40
NOBODY = 65534
MAX_CONNECTIONS = 128
"""Connections relayed at once; more wait in the listener's backlog."""

_libc = ctypes.CDLL(None, use_errno=True)
_slots = threading.BoundedSemaphore(MAX_CONNECTIONS)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _relay(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(1 << 16):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _connection(conn: socket.socket, port: int) -> None:
    try:
        for host in ("127.0.0.1", "::1"):
            try:
                up = socket.create_connection((host, port), timeout=10)
                break
            except OSError:
                continue
        else:  # nothing listens there: the tests see their connection reset
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return
        up.settimeout(None)
        back = threading.Thread(target=_relay, args=(up, conn), daemon=True)
        back.start()
        _relay(conn, up)
        back.join()
        up.close()
    finally:
        conn.close()
        _slots.release()


def _serve(listener: socket.socket, port: int) -> None:
    while True:
        conn, _ = listener.accept()
        _slots.acquire()
        threading.Thread(target=_connection, args=(conn, port), daemon=True).start()


def main() -> None:
    nsfd, ports = int(sys.argv[1]), [int(p) for p in sys.argv[2:]]
    _check(_libc.unshare(CLONE_NEWNET), "unshare")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # a new namespace's loopback starts down
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", IFF_UP | IFF_LOOPBACK | IFF_RUNNING))
    listeners = []
    for port in ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        listeners.append((s, port))
    print("bound", flush=True)
    if sys.stdin.readline() != "go\n":
        return
    _check(_libc.setns(nsfd, CLONE_NEWNET), "setns")  # threads made from here on connect from there
    os.close(nsfd)
    os.setgroups([])
    os.setgid(NOBODY)
    os.setuid(NOBODY)
    threads = [threading.Thread(target=_serve, args=lp, daemon=True) for lp in listeners]
    for t in threads:
        t.start()
    sys.stdin.readline()  # the host closes stdin (or kills this process) when the tests are done


if __name__ == "__main__":
    main()
