"""The supervisor of a session: one sandbox job that runs a step's commands one after the other, so that
what they leave running (a web server on a local port) still runs for the next commands and, beside the
tests' own job, for the tests.

    python3 -I -S supervisor.py ROOT        (the nonce in SESSION_NONCE, removed at once)

Requests come one a line on stdin (JSON): `{"op": "run", "id", "script", "timeout", "limit"}` runs the
script with bash in the working folder (output to a new file, read back from the descriptor that wrote
it: a process left behind may keep writing there, never into the answers); `{"op": "pack"}` packs the working folder (snapshot.py) and
sends it. Answers go to stdout, which only this process holds: `NONCE ID CODE` and a base64 line (the
first, `NONCE ready 0`, once it reads requests). It is
not dumpable, so a process the commands leave behind (the same uid) can neither open its descriptors
nor read its memory. Stdin's end ends the session (and everything the commands left running).
"""

import base64
import ctypes
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main(root: str) -> int:
    nonce = os.environ.pop("SESSION_NONCE")
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    app = os.getcwd()
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)  # the commands inherit nothing of the answers' channel
    outs = tempfile.mkdtemp(prefix=".ws-out-", dir=root)

    def answer(rid, code: int, data: bytes) -> None:
        out.write(f"{nonce} {rid} {code}\n".encode() + base64.b64encode(data) + b"\n")

    answer("ready", 0, b"")  # the host counts the commands' limits from here
    for line in sys.stdin.buffer:
        req = json.loads(line)
        if req["op"] == "run":
            fd, path = tempfile.mkstemp(prefix="cmd-", dir=outs)  # a new name each time (O_EXCL)
            with os.fdopen(fd, "w+b") as f:
                argv = ["/usr/bin/timeout", "-k", "2", str(req["timeout"]), "bash", "-c", req["script"]]
                code = subprocess.call(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT, cwd=app)
                f.seek(0)
                data = f.read(req["limit"])
            answer(req["id"], code, data)
        elif req["op"] == "pack":
            code = subprocess.call([sys.executable, "-I", "-S", os.path.join(HERE, "snapshot.py")], cwd=root)
            state = b""
            if code == 0:
                with open(os.path.join(root, ".ws-state.tar"), "rb") as packed:
                    state = packed.read()
            answer("state", code, state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
