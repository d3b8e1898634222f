"""The tests' guard: run first by every Python the tests' job starts, whatever its flags or environment.

The job's image runs `startup.py` at the start of every interpreter it holds (the system's python3, the
venv's, the interpreter the uv/uvx stand-ins run, a venv the tests make), from `encodings`, before `site`
and any code of the job's (`sandbox.image.install_startup`): `-I`, `-E`, `-s`, `-S`, `env -i`,
`-X frozen_modules=off`, `os.execv` and `subprocess` with an empty environment all keep it. In the tests'
job `startup.py` finds this file, read-only at its `GUARD`, and runs it; other jobs have none. Its settings
come from `guard.cfg` beside it, never from the environment.

Modules and installed distributions are found in folders the tests cannot write before any folder they
can, which may hold what the solution left (the working folder, which `python -m` and `-c` put first on
sys.path; a PYTHONPATH the task sets). "Cannot write" is asked of the kernel (`access`), which every
backend answers alike.

So `python3 -m pytest` run from the working folder imports the installed pytest, not a `pytest.py` the
solution planted there, and pytest's plugins (entry points of installed distributions) are never a
`*.dist-info` the solution planted; the solution's own modules are still found, after the installed
ones. pytest loads a `conftest.py` or reads a configuration file (`pytest.ini`, `pyproject.toml`,
`tox.ini`, `setup.cfg`, ...) only from a folder the tests cannot write or with the bytes of one the task
shipped (its tests or its image: `own_pytest_files`, their SHA-256s), and imports a plugin
(`-p`, `pytest_plugins`) only from such a folder or with such bytes, so tests copied into the working
folder neither run hooks nor take options the solution wrote beside them.

Code the solution wrote runs in the tests' process only when the task asks for it: a module whose file
lies in a folder the tests can write (the working folder: anything there may be the solution's) is
created only when its top-level name is one the task's tests require (`solution_modules`, read by the
host from the tests' own files, optional imports left out), or when a module so admitted imports it (the
solution's package importing its own helpers). Who asks does not matter: the tests'
optional `try: import ujson`, library code (the standard library's optional imports such as `org` or
`_winapi`, a C unpickler naming a module, pytest collecting a test module or a package `__init__.py`
above one) never gets a module the task did not name, and a module the task shipped is never
shadowed by a solution file of the same name in its folder (a package, an extension or a .pyc beside
it). The check sits in `module_from_spec`, which every loader goes through before it runs anything
(an extension's constructor included). Bytecode caches are read from and written to a folder of the
tests' job only (`pycache`, set as `sys.pycache_prefix`, which pytest's rewritten modules follow too),
never the working folder's `__pycache__`; a sourceless `.pyc` there is a solution file like any other.
Standard library only. Until the guard's finder is in place only modules built in or frozen are
imported (`posix`, not `os`), so none comes from a folder the tests can write.
"""

import _frozen_importlib
import builtins
import posix
import sys
from _frozen_importlib_external import PathFinder

TYPE_CHECKING = False  # no `typing` at start-up
if TYPE_CHECKING:  # imported by `_install`, once the guard's finder is in place
    import hashlib
    import importlib.util  # noqa: F401 (used by `_install`)
    import os
    import types

SETTINGS = "guard.cfg"
"""Beside it: one line per setting, its name and its value (`pycache`, `solution_modules`,
`own_pytest_files`: words separated by spaces)."""
_ro: dict = {}


def _read_only(entry):
    """The tests cannot write the sys.path entry nor make it writable: a read-only mount, or a folder not
    theirs that they cannot write (one of theirs with its write bits off, as the solution may leave it,
    counts as writable; a missing folder they could make too). Cached: the job's mounts and folders'
    owners do not change."""
    path = entry if entry.startswith("/") else posix.getcwd() + ("/" + entry if entry else "")
    if path not in _ro:
        try:
            st, fs = posix.stat(path), posix.statvfs(path)
        except OSError:
            _ro[path] = False
        else:
            locked = fs.f_flag & posix.ST_RDONLY or st.st_uid != posix.geteuid()
            _ro[path] = bool(locked) and not posix.access(path, posix.W_OK)
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


_OWN: frozenset = frozenset()
"""SHA-256s of the files the task shipped (`own_pytest_files`)."""
_hashes: dict = {}


def _own_bytes(path) -> bool:
    """The file has the bytes of one the task shipped (its tests, its image's pytest files)."""
    if path not in _hashes:
        try:
            with open(path, "rb") as f:
                _hashes[path] = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            _hashes[path] = ""
    return _hashes[path] in _OWN


def _shipped(file) -> bool:
    path = os.fspath(file)
    return _read_only(os.path.dirname(path)) or _own_bytes(path)


def _stderr():
    """The tests' stderr as it is now: pytest's capture, which would swallow a refusal, replaces fd 2 later."""
    try:
        return os.dup(2)
    except OSError:  # started with fd 2 closed
        return None


_STDERR = None


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


def _guard_yaml(module) -> None:
    """PyYAML's `!!python/name`, `!!python/module` and `!!python/object...` tags (the unsafe and full
    loaders, C-accelerated or not, all resolve them here) name only what a pickle may (`_pickle_global`)."""
    full = module.FullConstructor
    find_name, find_module = full.find_python_name, full.find_python_module

    def find_python_name(self, name, mark, unsafe=False):
        where, _, attr = name.rpartition(".")
        _refuse_global(where or "builtins", attr, "a YAML document")
        return find_name(self, name, mark, unsafe)

    def find_python_module(self, name, mark, unsafe=False):
        _refuse_global(name, "", "a YAML document")
        return find_module(self, name, mark, unsafe)

    full.find_python_name, full.find_python_module = find_python_name, find_python_module


_GUARDS = {
    "_pytest.config": _guard_config,
    "_pytest.config.findpaths": _guard_findpaths,
    "yaml.constructor": _guard_yaml,
}


class GuardModules:
    """Applies `_GUARDS` when pytest's configuration modules and PyYAML's constructors are first imported."""

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


_SOLUTION_MODULES: frozenset = frozenset()
_admitted: set = set()
"""Files in writable folders admitted as the task's own (its bytes) or as a solution module it names."""
_solution_files: set = set()
"""The solution modules admitted: their own imports are the solution's package, admitted too."""
_refused_modules: set = set()
_SKIPPED: tuple = ()
"""Files of the import system's own frames: importlib's wrappers (import_module) and this one."""


def _importer():
    """The file of the code that asked for the import under way, skipping the import system's frames."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen ") or name.startswith(_SKIPPED)):
            return name
        frame = frame.f_back
    return None


def _shadows_shipped(spec, origin) -> bool:
    """A solution file that would hide a module the task shipped in the same folder (`helpers/`,
    `helpers.cpython-311-x86_64-linux-gnu.so` or `helpers.pyc` beside the tests' `helpers.py`)."""
    folder = os.path.dirname(origin)
    if spec.submodule_search_locations is not None:
        folder = os.path.dirname(folder)
    source = os.path.join(folder, spec.name.rpartition(".")[2] + ".py")
    return source != origin and os.path.isfile(source) and _own_bytes(source)


def _allowed(spec) -> bool:
    origin = spec.origin if spec.has_location else None
    if not origin or _read_only(os.path.dirname(origin)):
        return True
    origin = os.path.abspath(origin)
    if origin in _admitted or _own_bytes(origin):
        _admitted.add(origin)
        return True
    if _shadows_shipped(spec, origin):
        _refuse(f"{origin}, a solution file in place of the module {spec.name} the task shipped")
        return False
    if spec.name.partition(".")[0] in _SOLUTION_MODULES or _importer() in _solution_files:
        _admitted.add(origin)
        _solution_files.add(origin)
        return True
    if origin not in _refused_modules:
        _refused_modules.add(origin)
        _refuse(f"{origin}, a module in a folder the solution could write that the task's tests do not require")
    return False


_module_from_spec = _frozen_importlib.module_from_spec


def _guarded_module_from_spec(spec):
    """Every loader's first step (`import`, importlib.import_module, pytest's own module loading): a module
    the tests did not ask for is not found."""
    if not _allowed(spec):
        raise ModuleNotFoundError(f"No module named {spec.name!r}", name=spec.name)
    return _module_from_spec(spec)


def _pairs(module: str, names: str) -> set:
    return {(module, name) for name in names.split()}


_BUILTIN_DATA = _pairs(
    "builtins", "int float complex str bytes bytearray list dict set frozenset tuple bool slice range object Ellipsis"
) | {("builtins", n) for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
_PICKLE_DATA = frozenset().union(
    _BUILTIN_DATA,
    _pairs("copyreg", "_reconstructor"),
    _pairs("_codecs", "encode"),
    _pairs("collections", "OrderedDict defaultdict deque Counter ChainMap UserDict UserList UserString"),
    _pairs("fractions", "Fraction"),
    _pairs("decimal", "Decimal"),
    _pairs("datetime", "date datetime time timedelta timezone"),
    _pairs("numpy", "ndarray dtype"),
    *(_pairs(f"numpy.{core}.multiarray", "_reconstruct scalar") for core in ("core", "_core")),
    *(_pairs(f"numpy.{core}.numeric", "_frombuffer") for core in ("core", "_core")),
    _pairs("numpy._core._internal", "_convert_to_stringdtype_kwargs"),
    _pairs("pandas", "DataFrame Series Index RangeIndex Categorical CategoricalDtype"),
    _pairs("pandas.core.indexes.base", "_new_Index"),
    _pairs("pandas.core.internals.managers", "BlockManager SingleBlockManager"),
    _pairs("pandas._libs.internals", "_unpickle_block"),
    _pairs("pandas._libs.arrays", "__pyx_unpickle_NDArrayBacked"),
    _pairs("pandas._libs.tslibs.timestamps", "_unpickle_timestamp"),
)
"""The globals that pickles of plain data name, found by pickling values of each type (numpy arrays, scalars,
dtypes; pandas frames; collections, fractions, decimal and datetime values; builtins' containers and
exceptions) at every protocol, with numpy 1's `numpy.core` spelling: constructors of data with no effect
outside the object they make, whose equality is value equality the data cannot switch off (no masked,
pyarrow-backed or matrix / record arrays: a fully masked array equals any array under `np.testing`). Exact (module, name) pairs: no other function of these
modules (numpy.savetxt, numpy.loadtxt) and no dotted name through them (`collections._sys.exit`) resolves."""


def _defined_in(module: str, name: str) -> bool:
    """`name` is a function or class defined at the top of `module` itself, not one it imported."""
    value = getattr(sys.modules.get(module), name, None)
    return "." not in name and getattr(value, "__module__", None) == module


def _pickle_global(module: str, name: str) -> bool:
    """A global a pickle names may resolve when it is a plain data constructor (`_PICKLE_DATA`), or a
    function or class defined in a solution module the tests import (whose code they run anyway). Never
    one of the tests' own (a pickle calling their reward writer with its arguments). Python 2 names are
    read as the unpickler reads them (`__builtin__.set`)."""
    from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING

    module, name = NAME_MAPPING.get((module, name), (IMPORT_MAPPING.get(module, module), name))
    if (module, name) in _PICKLE_DATA:
        return True
    loaded = getattr(sys.modules.get(module), "__file__", None)
    return loaded is not None and os.path.abspath(loaded) in _solution_files and _defined_in(module, name)


def _audit(event, args) -> None:
    """A deserialiser in the tests' process (pickle, numpy.load(allow_pickle=True), pandas.read_pickle,
    torch.load) and PyYAML's python tags resolve only the globals `_pickle_global` admits: a `__reduce__`
    of the solution's naming eval, os.system, numpy.savetxt or a module it wrote is refused before anything
    runs."""
    if event == "pickle.find_class":
        _refuse_global(args[0], args[1], "a pickle")


def _refuse_global(module: str, name: str, what: str) -> None:
    if not _pickle_global(module, name):
        shown = f"{module}.{name}" if name else f"module {module}"
        _refuse(f"{shown}, a global {what} the solution wrote names (not a plain data constructor)")
        raise RuntimeError(f"loading {shown} from {what} is refused in the tests' process")


def _install() -> None:
    """Put the guard in place: the finder first (before any module is imported from a folder), then the
    settings, the import gate, pytest's and PyYAML's guards and the pickle hook."""
    global os, hashlib, importlib, types, _OWN, _SOLUTION_MODULES, _SKIPPED, _STDERR
    PathFinder.find_distributions = staticmethod(_installed_only)  # type: ignore[method-assign]
    sys.meta_path.insert(sys.meta_path.index(PathFinder) if PathFinder in sys.meta_path else 0, ReadOnlyFirst)
    import _io
    import hashlib
    import importlib.util
    import os
    import types

    with _io.open(os.path.join(os.path.dirname(__file__), SETTINGS), "rb") as f:  # no codec is set up yet
        settings = dict(line.partition(" ")[::2] for line in f.read().decode().splitlines())
    _OWN = frozenset(settings["own_pytest_files"].split())
    _SOLUTION_MODULES = frozenset(settings["solution_modules"].split())
    sys.pycache_prefix = settings["pycache"]
    _SKIPPED = (os.path.dirname(importlib.util.__file__) + os.sep, __file__)
    _STDERR = _stderr()
    sys.meta_path.insert(0, GuardModules)
    _frozen_importlib.module_from_spec = _guarded_module_from_spec
    importlib.util.module_from_spec = _guarded_module_from_spec
    sys.addaudithook(_audit)
    if settings.get("tests_own"):
        _fence(settings)


def _fence(settings) -> None:
    """The tests' own files fenced off from links and from the solution's programs (`fence.py`, beside),
    once the interpreter is about to run its main code (`cpython.run_file`, `run_module`, `run_command`,
    ...): its arguments are known then and the standard library is set up. Not in the job's own scripts."""
    loaded: list = []

    def load(event, args) -> None:
        if loaded or not event.startswith("cpython.run_"):
            return
        loaded.append(event)
        here = os.path.dirname(__file__)
        if sys.argv and sys.argv[0] and os.path.dirname(os.path.abspath(sys.argv[0])) == here:  # restore.py
            return
        from _frozen_importlib_external import spec_from_file_location

        spec = spec_from_file_location("_tempering_fence", os.path.join(here, "fence.py"))
        if spec is None or spec.loader is None:  # a .py file always has both
            raise ImportError("the tests' fence cannot be loaded")
        fence = _module_from_spec(spec)
        spec.loader.exec_module(fence)
        own, reward = settings["tests_own"].split(), settings["reward_dirs"].split()
        fence.install(own, reward, lambda folder: not _read_only(folder), _say)

    sys.addaudithook(load)


_install()
