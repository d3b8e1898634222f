import pytest

from tempering.sandbox import Sandbox

BACKENDS = Sandbox.available_backends()
ISOLATED = [b for b in BACKENDS if b != "subprocess"]


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture(params=ISOLATED or [pytest.param("none", marks=pytest.mark.skip("no isolating backend here"))])
def isolated(request) -> str:
    return request.param


FILTERED = [b for b in ISOLATED if b in ("bwrap", "unshare")]


@pytest.fixture(
    params=FILTERED or [pytest.param("none", marks=pytest.mark.skip("no backend with the seccomp filter here"))]
)
def filtered(request) -> str:
    """A backend whose jobs call the host's kernel through the seccomp allow-list (not gvisor's)."""
    return request.param
