"""The adversarial suite's cases on the kernel path (`tempering.sandbox.attacks`, loaded by name): the
read-timing channel between two candidates' jobs on the pool kernel jobs run on (`KernelVerifier.sandbox`,
whose warm workers see the same image)."""

from __future__ import annotations

import secrets
import sys

from tempering.sandbox import attacks as _attacks
from tempering.sandbox.attacks import Case
from tempering.sandbox.job import Job, Limits
from tempering.sandbox.sandbox import Sandbox


def _timing_case(mmap: bool) -> Case:
    """One candidate's job reads one file of each pair the kernel image shows, a later candidate's job
    times reads of both."""

    async def run(sandbox: Sandbox) -> str:
        from tempering.envs.kernels.verifier import KernelVerifier

        pool = KernelVerifier(sandbox=sandbox).sandbox

        async def script(source: str) -> tuple[str, str]:
            res = await pool.run(Job(cmd=[sys.executable, "-c", source], limits=Limits(wall_s=120, cpu_s=60)))
            return res.status, res.stdout + (f"\n{res.message} {res.stderr}" if res.status != "ok" else "")

        return await _attacks.read_timing(pool, secrets.token_hex(8), script, mmap)

    name = "read_timing_channel_mmap" if mmap else "read_timing_channel"
    return Case(_attacks.TIMING_CLASS, name, "kernel worker", run, what="reads another candidate's job cached")


CASES = [_timing_case(False), _timing_case(True)]
