"""Run untrusted (model-written) code: isolated, limited, many jobs at once.

    sb = Sandbox()                                   # bubblewrap, else unshare namespaces
    res = await sb.run(Job(cmd=["python3", "main.py"], files={"main.py": src}))
    res.status, res.stdout, res.outputs

`BuildCache` compiles each distinct (sources, command, limits, compiler) once and keeps only successful
builds. `tempering.sandbox.ray` has `RaySandbox`, the same API over Ray actors (extra `ray`). See
docs/sandbox.md for what each backend guarantees.
"""

from tempering.sandbox.cache import BuildCache, BuildResult
from tempering.sandbox.job import Job, Limits, Result, gpu_devices
from tempering.sandbox.sandbox import Sandbox

__all__ = ["BuildCache", "BuildResult", "Job", "Limits", "Result", "Sandbox", "gpu_devices"]
