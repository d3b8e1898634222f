import asyncio

import pytest


@pytest.fixture(scope="session")
def kernel_verifier(tmp_path_factory):
    """A verifier on the real sandbox (two jobs at once) with cheap checks; skips where no sandbox works."""
    from tempering.envs.kernels.verifier import KernelVerifier, VerifyConfig
    from tempering.errors import UserError
    from tempering.sandbox import Sandbox

    try:
        sandbox = Sandbox(image="host", concurrency=2)
    except UserError as e:
        pytest.skip(f"no sandbox backend: {e}")
    cfg = VerifyConfig(
        seeds=1,
        signed_trials=1,
        warmup=1,
        timed_runs=3,
        compile_baseline="off",
        memory_mb=8192,
        cache_dir=str(tmp_path_factory.mktemp("kernel-cache")),
    )
    return KernelVerifier(cfg, sandbox=sandbox)


def run(coro):
    return asyncio.run(coro)
