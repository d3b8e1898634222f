"""Run first by every interpreter of a terminal task's image, whatever its flags (`sandbox.image.Spec`,
`python_startup`): the tests' guard, in the job that has one (`guard.py`, read-only at `GUARD` in the
tests' job); in any other job, nothing. Built-in and frozen modules only: nothing is found on sys.path."""

import posix

GUARD = "/job/.ws/guard.py"
"""Where the tests' job shows the guard (its folder is /job on every isolating backend)."""

try:
    posix.stat(GUARD)
except OSError:
    pass
else:
    import sys
    from _frozen_importlib import module_from_spec
    from _frozen_importlib_external import spec_from_file_location

    spec = spec_from_file_location("_tempering_guard", GUARD)
    if spec is None or spec.loader is None:  # a .py file always has both
        raise ImportError(f"the tests' guard {GUARD} cannot be loaded")
    sys.modules[spec.name] = module = module_from_spec(spec)
    spec.loader.exec_module(module)
