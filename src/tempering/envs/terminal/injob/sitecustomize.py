"""Imported first by every Python the tests start (it is first on their PYTHONPATH, in a read-only folder,
so no `sitecustomize` the solution wrote is imported in its place): modules and installed distributions
are found in folders the tests cannot write before any folder they can, which may hold what the solution
left (the working folder, which `python -m` and `-c` put first on sys.path; a PYTHONPATH the task sets).
"Cannot write" is asked of the kernel (`access`), which every backend answers alike.

So `python3 -m pytest` run from the working folder imports the installed pytest, not a `pytest.py` the
solution planted there, and pytest's plugins (entry points of installed distributions) are never a
`*.dist-info` the solution planted; the solution's own modules are still found, after the installed
ones. Standard library only; the same for every Python version the tests may run.
"""

import os
import sys
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
