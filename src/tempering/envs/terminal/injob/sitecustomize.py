"""Imported first by every Python the tests start (it is first on their PYTHONPATH, in a read-only folder,
so no `sitecustomize` the solution wrote is imported in its place): modules and installed distributions
are found in folders the tests cannot write before any folder they can, which may hold what the solution
left (the working folder, which `python -m` and `-c` put first on sys.path; a PYTHONPATH the task sets).
"Cannot write" is asked of the kernel (`access`), which every backend answers alike.

So `python3 -m pytest` run from the working folder imports the installed pytest, not a `pytest.py` the
solution planted there, and pytest's plugins (entry points of installed distributions) are never a
`*.dist-info` the solution planted; the solution's own modules are still found, after the installed
ones. pytest loads a `conftest.py` only from a folder the tests cannot write or with the bytes of one
the task shipped (its tests or its image: `TEMPERING_OWN_CONFTESTS`, their SHA-256s), so tests copied
into the working folder do not run hooks the solution wrote beside them. Standard library only; the
same for every Python version the tests may run.
"""

import hashlib
import os
import sys
import types
from importlib.machinery import PathFinder

_ro: dict = {}


def _read_only(entry):
    """The tests cannot write the sys.path entry (a read-only mount, or not theirs; a missing folder they
    could make counts as writable). Cached: the job's mounts and folders' owners do not change."""
    path = os.path.abspath(entry or os.getcwd())
    if path not in _ro:
        _ro[path] = os.path.exists(path) and not os.access(path, os.W_OK)
    return _ro[path]


def _ordered():
    return [e for e in sys.path if _read_only(e)] + [e for e in sys.path if not _read_only(e)]


class ReadOnlyFirst:
    """A top-level import searches the sys.path entries the tests cannot write first, then the rest."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if path is not None else PathFinder.find_spec(name, _ordered(), target)

    @classmethod
    def invalidate_caches(cls):
        _ro.clear()


_find_distributions = PathFinder.find_distributions


def _installed_only(*args, **kwargs):
    """importlib.metadata's search of sys.path (pytest's plugins, entry points): the entries the tests cannot
    write only."""
    from importlib.metadata import DistributionFinder

    context = args[0] if args else kwargs.pop("context", DistributionFinder.Context(**kwargs))
    if "path" not in vars(context):  # the default: all of sys.path
        context = DistributionFinder.Context(name=context.name, path=[e for e in sys.path if _read_only(e)])
    return _find_distributions(context)


PathFinder.find_distributions = staticmethod(_installed_only)  # type: ignore[method-assign]
sys.meta_path.insert(sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else 0, ReadOnlyFirst)


def _shipped(conftest) -> bool:
    path = os.fspath(conftest)
    if _read_only(os.path.dirname(path)):
        return True
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest() in os.environ.get("TEMPERING_OWN_CONFTESTS", "").split()


def _guard(manager) -> None:
    """pytest's conftest loader, refusing a conftest.py the task did not ship in a folder the tests can write."""
    load = manager._importconftest

    def importconftest(self, conftestpath, *args, **kwargs):
        if _shipped(conftestpath):
            return load(self, conftestpath, *args, **kwargs)
        sys.stderr.write(f"[not loaded: {conftestpath}, a conftest.py the task did not ship]\n")
        return types.ModuleType("conftest")

    manager._importconftest = importconftest


class GuardPytest:
    """Applies `_guard` when pytest's configuration module is first imported."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "_pytest.config":
            return None
        spec = PathFinder.find_spec(name, path if path is not None else _ordered(), target)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _guard(module.PytestPluginManager)

            spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, GuardPytest)
