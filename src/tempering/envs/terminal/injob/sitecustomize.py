"""Imported first by every Python the tests start (it is first on their PYTHONPATH, in a read-only folder,
so no `sitecustomize` the solution wrote is imported in its place): modules and installed distributions
are found in folders the tests cannot write before any folder they can, which may hold what the solution
left (the working folder, which `python -m` and `-c` put first on sys.path; a PYTHONPATH the task sets).
"Cannot write" is asked of the kernel (`access`), which every backend answers alike.

So `python3 -m pytest` run from the working folder imports the installed pytest, not a `pytest.py` the
solution planted there, and pytest's plugins (entry points of installed distributions) are never a
`*.dist-info` the solution planted; the solution's own modules are still found, after the installed
ones. pytest loads a `conftest.py` or reads a configuration file (`pytest.ini`, `pyproject.toml`,
`tox.ini`, `setup.cfg`, ...) only from a folder the tests cannot write or with the bytes of one the task
shipped (its tests or its image: `TEMPERING_OWN_PYTEST_FILES`, their SHA-256s), and imports a plugin
(`-p`, `pytest_plugins`) only from such a folder or with such bytes, so tests copied into the working
folder neither run hooks nor take options the solution wrote beside them. Standard library only; the
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


def _shipped(file) -> bool:
    path = os.fspath(file)
    if _read_only(os.path.dirname(path)):
        return True
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest() in os.environ.get("TEMPERING_OWN_PYTEST_FILES", "").split()


def _stderr():
    """The tests' stderr as it is now: pytest's capture, which would swallow a refusal, replaces fd 2 later."""
    try:
        return os.dup(2)
    except OSError:  # started with fd 2 closed
        return None


_STDERR = _stderr()


def _say(line) -> None:
    if _STDERR is not None:
        os.write(_STDERR, f"[{line}]\n".encode(errors="replace"))


def _refuse(what) -> None:
    _say(f"not loaded: {what}")


def _plugin_installed(name) -> bool:
    """The plugin module `name` (or its top package) is already imported, or found in a folder the tests
    cannot write, or has the bytes of a file the task shipped, or is not a module at all (pytest then
    fails or loads the entry point of that name)."""
    top = name.partition(".")[0]
    if top in sys.modules:
        return True
    spec = PathFinder.find_spec(top, _ordered())
    if spec is None:
        return True
    if spec.has_location and spec.origin:
        return _shipped(spec.origin)
    return all(_read_only(d) for d in spec.submodule_search_locations or ())  # a namespace package


def _entry_point(name) -> bool:
    from importlib.metadata import entry_points

    found = entry_points()
    if hasattr(found, "select"):
        return bool(found.select(group="pytest11", name=name))
    return any(e.name == name for e in found.get("pytest11", ()))  # Python < 3.10


def _guard_config(module) -> None:
    """pytest's conftest and plugin loaders: a conftest.py the task did not ship in a folder the tests can
    write is not loaded; a plugin (`-p`, `pytest_plugins`) is imported only from
    outside such folders, or with the bytes the task shipped."""
    manager = module.PytestPluginManager
    load, import_plugin = manager._importconftest, manager.import_plugin

    def importconftest(self, conftestpath, *args, **kwargs):
        if _shipped(conftestpath):
            return load(self, conftestpath, *args, **kwargs)
        _refuse(f"{conftestpath}, a conftest.py the task did not ship")
        return types.ModuleType("conftest")

    def guarded_import_plugin(self, modname, consider_entry_points=False):
        spec = "_pytest." + modname if modname in getattr(module, "builtin_plugins", ()) else modname
        if _plugin_installed(spec) or (consider_entry_points and _entry_point(modname)):
            return import_plugin(self, modname, consider_entry_points)
        _refuse(f"plugin {modname}, a module the task did not ship in a folder the tests can write")

    manager._importconftest = importconftest
    manager.import_plugin = guarded_import_plugin


_refused_configs: set = set()


def _config_loader(load):
    """A loader of pytest's configuration files that reads a file only from a folder the tests cannot write
    or with the bytes the task shipped; pytest takes a refused file for one without a pytest section and
    looks further up."""

    def guarded(path, *args, **kwargs):
        if _shipped(path):
            return load(path, *args, **kwargs)
        if os.fspath(path) not in _refused_configs:
            _refused_configs.add(os.fspath(path))
            _refuse(f"{path}, a pytest configuration file the task did not ship")
        return None

    return guarded


def _guard_findpaths(module) -> None:
    """Every way pytest reads a configuration file: its loaders by name and suffix (pytest 9), or the one
    function that reads them all (earlier versions)."""
    tables = [t for t in ("CONFIG_LOADERS_BY_NAME", "CONFIG_LOADERS_BY_SUFFIX") if hasattr(module, t)]
    for table in tables:
        loaders = getattr(module, table)
        loaders.update({k: _config_loader(v) for k, v in loaders.items()})
    if not tables and hasattr(module, "load_config_dict_from_file"):
        module.load_config_dict_from_file = _config_loader(module.load_config_dict_from_file)
    elif not tables:
        _say("this pytest (< 6) reads configuration files from any folder: not guarded")


_GUARDS = {"_pytest.config": _guard_config, "_pytest.config.findpaths": _guard_findpaths}


class GuardPytest:
    """Applies `_GUARDS` when pytest's configuration modules are first imported."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name not in _GUARDS:
            return None
        spec = PathFinder.find_spec(name, path if path is not None else _ordered(), target)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                _GUARDS[name](module)

            spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, GuardPytest)
