"""What a submission may reach: modules, the names in them, builtins (read-only; provided by the harness).

One policy, applied twice: by the static check on the host (`submission.static_check` resolves every
imported name and attribute chain against the real modules) and at run time in the candidate's process
(`runner.py`: the candidate's module gets these builtins only, its imports go through `checked_import`,
and each allowed module reaches it as a proxy that hands out allowed names only).

The rules are about reach, not about names of hacks: a module is reachable only if it is listed, an
attribute only if it is public (no leading underscore), is not a module outside the list (`torch.os`,
`torch.multiprocessing`, `torch.utils.cpp_extension.sys`) and is not one of the few functions that
change the process's timing or escape the checks (`torch.compile`, `torch.set_num_threads`, ...).
"""

import types

PUBLIC = None
"""Marker: every public attribute of the module that the rules below let through."""

MODULES = {
    "torch": PUBLIC,
    "torch.nn": PUBLIC,
    "torch.nn.functional": PUBLIC,
    "torch.nn.init": PUBLIC,
    "torch.utils": frozenset({"cpp_extension"}),
    "torch.utils.cpp_extension": frozenset({"load_inline"}),
    "math": PUBLIC,
    "typing": PUBLIC,
    "__future__": PUBLIC,
    "ckernel": frozenset({"load_c"}),
    "triton": PUBLIC,
    "triton.language": PUBLIC,
}
"""Importable modules -> the names a submission may take from them (PUBLIC: any public one)."""

DENIED = {
    "torch": frozenset(
        {
            "compile",  # generated code that runs outside the operator checks
            "load",  # files
            "save",
            "from_file",
            "set_num_threads",  # more threads than the baselines get
            "set_num_interop_threads",
            "set_flush_denormal",  # process-wide arithmetic changes
            "set_default_device",
            "set_default_dtype",
            "set_default_tensor_type",
            "Stream",  # work on another stream, outside the timed call
            "Event",
        }
    ),
}
"""Public names of allowed modules that are still out of reach."""

BUILTINS = frozenset(
    {
        "abs",
        "all",
        "any",
        "bool",
        "bytes",
        "callable",
        "chr",
        "classmethod",
        "complex",
        "dict",
        "divmod",
        "enumerate",
        "filter",
        "float",
        "format",
        "frozenset",
        "hash",
        "int",
        "isinstance",
        "issubclass",
        "iter",
        "len",
        "list",
        "map",
        "max",
        "min",
        "next",
        "ord",
        "pow",
        "print",
        "property",
        "range",
        "repr",
        "reversed",
        "round",
        "set",
        "slice",
        "sorted",
        "staticmethod",
        "str",
        "sum",
        "super",
        "tuple",
        "zip",
        "None",
        "True",
        "False",
        "Ellipsis",
        "NotImplemented",
        "ArithmeticError",
        "AssertionError",
        "Exception",
        "IndexError",
        "KeyError",
        "NotImplementedError",
        "RuntimeError",
        "StopIteration",
        "TypeError",
        "ValueError",
        "ZeroDivisionError",
    }
)
"""Builtins a submission may use. Not here: open, exec, eval, compile, __import__, getattr and its
kin, globals/locals/vars, type, object, id, memoryview, input, breakpoint, exit."""

SPECIAL_METHODS = frozenset({"__init__"})
"""The one special method a submission's classes may define: the others (`__del__`, `__exit__`,
`__getattr__`, `__torch_function__`, `__float__`, ...) run at moments the harness does not choose."""


# What a candidate's forward may do with torch: allocate, look at metadata, take views and copies.
# Checked by name on every torch function and Tensor method call (TorchFunctionMode); everything else
# (arithmetic, torch.nn.functional, .numpy(), ...) raises.
ALLOWED_CALLS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "zeros",
        "zeros_like",
        "new_zeros",
        "zero_",
        "fill_",
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "contiguous",
        "t",
        "transpose",
        "permute",
        "unsqueeze",
        "squeeze",
        "expand",
        "expand_as",
        "flatten",
        "unflatten",
        "detach",
        "clone",
        "copy_",
        "to",
        "cpu",
        "cuda",
        "select",
        "narrow",
        "split",
        "chunk",
        "unbind",
        "__getitem__",
        "__get__",
        "__len__",
        "data_ptr",
        "numel",
        "nelement",
        "size",
        "dim",
        "ndimension",
        "stride",
        "is_contiguous",
        "element_size",
        "storage_offset",
        "is_floating_point",
        "get_device",
        "__format__",
        "__repr__",
    }
)
# What building a model needs on top (module import and `__init__` run under the ban too): allocating,
# filling parameters with random or constant values (torch.nn.init, the layers' reset_parameters),
# loading the reference's weights. Computing is not building: a table of the op made with torch in
# `__init__` is torch doing the kernel's work outside the timed call.
INIT_CALLS = frozenset(
    {
        "ones",
        "ones_like",
        "full",
        "full_like",
        "new_ones",
        "new_full",
        "tensor",
        "as_tensor",
        "arange",
        "linspace",
        "eye",
        "rand",
        "rand_like",
        "randn",
        "randn_like",
        "randint",
        "randperm",
        "uniform_",
        "normal_",
        "random_",
        "bernoulli_",
        "requires_grad_",
        "uniform",
        "normal",
        "trunc_normal_",
        "constant_",
        "ones_",
        "zeros_",
        "eye_",
        "dirac_",
        "xavier_uniform_",
        "xavier_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "calculate_gain",
        "_calculate_fan_in_and_fan_out",
        "_calculate_correct_fan",
        "_no_grad_uniform_",
        "_no_grad_normal_",
        "_no_grad_fill_",
        "_no_grad_zero_",
        "_make_subclass",
        "__setstate__",
        "__deepcopy__",
        "__reduce_ex__",
        "share_memory_",
        "_set_grad_enabled",  # torch.nn.init fills under torch.no_grad()
        "_parse_to",  # Module.to
        "_has_compatible_shallow_copy_type",
        "__set__",  # setting a tensor's property (param.data = t, requires_grad)
        "is_complex",
    }
)
# The same at the aten level, for compiled code that calls into ATen (torch_ext, cuda) and for any
# path around the function-level check.
ALLOWED_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "zero_",
        "fill_",
        "view",
        "_unsafe_view",
        "reshape",
        "as_strided",
        "t",
        "transpose",
        "permute",
        "unsqueeze",
        "squeeze",
        "expand",
        "alias",
        "detach",
        "clone",
        "copy_",
        "contiguous",
        "lift_fresh",
        "select",
        "slice",
        "split",
        "chunk",
        "unbind",
        "_to_copy",
        "to",
        "resize_",
    }
)
ALLOCATION_OPS = frozenset(
    {"empty_memory_format", "empty_names", "zeros_names", "_reshape_alias", "sym_size", "sym_stride"}
)
"""ATen's names (some as overloads) of allocation and metadata calls besides ALLOWED_OPS'."""


def refusal(module: str, name: str, value=None, known: bool = True) -> str:
    """Why `module.name` is out of reach ('' if it may be used). `value` is the attribute itself
    (when `known`): a module must be listed in MODULES to be reachable."""
    if module not in MODULES:
        return f"{module} is not an allowed module (allowed: {', '.join(sorted(MODULES))})"
    if name.startswith("_"):
        return f"{module}.{name} is private (internals of {module} are out of reach)"
    allowed = MODULES[module]
    if allowed is not PUBLIC and name not in allowed:
        return f"{module}.{name} is not allowed (from {module} only {', '.join(sorted(allowed))})"
    if name in DENIED.get(module, ()):
        return f"{module}.{name} is not allowed in a submission"
    if known and isinstance(value, types.ModuleType):
        full = getattr(value, "__name__", f"{module}.{name}")
        if full not in MODULES and f"{module}.{name}" not in MODULES:
            return f"{module}.{name} is the module {full}, which is not allowed"
    return ""


def module_name(module: str, name: str, value) -> str | None:
    """The MODULES key that `module.name` stands for when it is an allowed module, else None."""
    if not isinstance(value, types.ModuleType):
        return None
    for key in (f"{module}.{name}", getattr(value, "__name__", "")):
        if key in MODULES:
            return key
    return None
