import pytest


@pytest.fixture(scope="session")
def sandbox():
    from tempering.sandbox import Sandbox

    return Sandbox(backend="bwrap" if "bwrap" in Sandbox.available_backends() else "subprocess", concurrency=2)


@pytest.fixture(scope="session")
def seeds():
    from tempering.synth.seeds import load_seeds

    return load_seeds("builtin")
