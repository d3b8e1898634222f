"""Typed configs: pydantic schemas with a one-line doc per field, loaded from YAML plus `a.b=value`
overrides. An unknown key or a bad value is a `ConfigError` that names the key and what is allowed.

The command line of every verb and sub-command (`Parser`, `parse`, `from_args`): the settings a config
schema holds are given only as `[CONFIG.yaml] [key=value ...]`, flags only for what is not config."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import json
import operator
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from tempering import syntax, trl_names
from tempering.errors import ConfigError, UserError


class Schema(BaseModel):
    """Base of every config section: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


S = TypeVar("S", bound=Schema)


def parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} is not of the form key.sub=value")
    key, _, raw = item.partition("=")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for k in path[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            elif not isinstance(nxt, dict):
                raise ConfigError(f"override {item!r}: {k!r} is a value, not a section")
            node = nxt
        node[path[-1]] = value
    return data


def _section(schema: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The schema class at a location path, to list its allowed keys."""
    cls: Any = schema
    for k in loc[:-1]:
        field = getattr(cls, "model_fields", {}).get(k)
        if field is None:
            return None
        cls = field.annotation
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)):
            return None
    return cls


def _has(schema: type[BaseModel], key: str) -> bool:
    sec = _section(schema, tuple(key.split(".")))
    return sec is not None and key.rsplit(".", 1)[-1] in sec.model_fields


def _unknown(key: str, value: Any, names: list[str], has) -> str:
    """The line for an unknown key: a TRL name's translation, or the nearest allowed name, and the rest."""
    name = key.rsplit(".", 1)[-1]
    near = difflib.get_close_matches(name, names, n=1)
    trl = trl_names.hint(name, value, has)
    hint = f"{trl}; " if trl else f"did you mean {near[0]!r}? " if near else ""
    return f"unknown key {key!r}; {hint}allowed here: {', '.join(names) or '?'}"


def format_errors(schema: type[BaseModel], err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(x) for x in e["loc"])
        if e["type"] == "extra_forbidden":
            sec = _section(schema, e["loc"])
            names = list(sec.model_fields) if sec is not None else []
            lines.append(_unknown(key, e.get("input"), names, lambda k: _has(schema, k)))
        elif e["type"] == "value_error":  # our validators name the keys themselves
            lines.append(str(e["msg"]).removeprefix("Value error, "))
        else:
            lines.append(f"{key}: {e['msg']} (got {e.get('input')!r})")
    return "invalid config: " + "; ".join(lines)


def build(schema: type[S], data: dict) -> S:
    try:
        return schema.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_errors(schema, e)) from None


def _split_spec(value: str) -> tuple[str, str]:
    """(file, `:Name`) of a `file.py:Name` spec; (value, "") for anything else."""
    head, sep, name = value.rpartition(":")
    if sep and head and all(part.isidentifier() for part in name.split(".")):
        return head, sep + name
    return value, ""


def _leaf_items(data: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """(`a.b.c`, container, index) of every leaf value in nested mappings and lists."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    out: list[tuple[str, Any, Any]] = []
    for k, v in items:
        name = f"{key}.{k}" if key else str(k)
        out += _leaf_items(v, name) if isinstance(v, (dict, list)) else [(name, data, k)]
    return out


def anchor_paths(data: dict) -> dict:
    """Relative paths in a config made absolute (in place, and returned): a string that names an existing
    file or folder from here and looks like a path (has a `/` or a suffix), or a `file.py:Name` spec. The
    run's config.yaml then reads the same files whatever folder `--resume` is started from, and wherever
    the run folder is copied to."""
    for _, box, k in _leaf_items(data):
        v = box[k]
        if not isinstance(v, str) or "://" in v or v.startswith(("/", "~")):
            continue
        path, name = _split_spec(v)
        if ("/" in path or Path(path).suffix) and Path(path).exists():
            box[k] = str(Path(path).resolve()) + name
    return data


def gone_paths(data: dict) -> list[tuple[str, str]]:
    """(key, value) of the absolute paths a config names that no longer exist (folders of a run's own
    outputs, keys ending in `_dir`, left out: runs create them)."""
    gone = []
    for key, box, k in _leaf_items(data):
        v = box[k]
        if (
            isinstance(v, str)
            and v.startswith("/")
            and not key.endswith("_dir")
            and not Path(_split_spec(v)[0]).exists()
        ):
            gone.append((key, v))
    return gone


def as_config(schema: type[S], cfg: S | dict) -> S:
    """A validated config from a dict (Python callers), or the config itself."""
    return build(schema, cfg) if isinstance(cfg, dict) else cfg


def read_data(path: str | Path | None = None, overrides: list[str] | None = None) -> dict:
    """The raw mapping of a YAML config file (none: empty) with `a.b=value` overrides applied."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            what = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"config file {p} is not valid YAML{where}: {what}; fix the file") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file {p} must hold a mapping at the top level")
    return apply_overrides(data, overrides or [])


def load_config(schema: type[S], path: str | Path | None = None, overrides: list[str] | None = None) -> S:
    return build(schema, read_data(path, overrides))


_TRUE_FALSE = {"0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes"}


def _refused(tname: str, v: Any) -> str | None:
    """Pydantic's message when it surely refuses `v` for a field of plain type `tname` (`int`, `float`,
    `bool`, `str`, optionally `| None` and a range such as `int (>= 1)`, or a `Literal` of strings); None
    when it may accept it (or the type is another)."""
    if tname.startswith("Literal["):  # string choices: pydantic takes exactly one of them
        choices = syntax.literal(f"({tname[len('Literal[') : -1]},)")
        if not all(isinstance(c, str) for c in choices) or v in choices:
            return None
        names = [repr(c) for c in choices]
        return "Input should be " + (f"{', '.join(names[:-1])} or {names[-1]}" if len(names) > 1 else names[0])
    tname, _, bounds = tname.partition(" (")
    why = _refused_type(tname, v)
    if why or not bounds or v is None or tname.removesuffix(" | None") not in ("int", "float"):
        return why
    for bound in bounds.removesuffix(")").split(", "):
        op, limit = bound.split(" ")
        holds, words = BOUNDS[op]
        if not holds(float(v), float(limit)):
            return f"Input should be {words} {limit}"
    return None


BOUNDS = {
    ">=": (operator.ge, "greater than or equal to"),
    ">": (operator.gt, "greater than"),
    "<=": (operator.le, "less than or equal to"),
    "<": (operator.lt, "less than"),
}
"""A range's operator, as the reference writes it: the test, and pydantic's words for a value outside."""


def _refused_type(tname: str, v: Any) -> str | None:
    optional = tname.endswith(" | None")
    base = tname.removesuffix(" | None")
    noun = {"int": "integer", "float": "number", "bool": "boolean", "str": "string"}.get(base)
    if noun is None:
        return None
    if v is None:
        return None if optional else f"Input should be a valid {noun}"
    if base == "str":
        return None if isinstance(v, str) else "Input should be a valid string"
    if isinstance(v, (list, dict)):
        return f"Input should be a valid {noun}"
    if base == "bool":
        if isinstance(v, float):
            if v in (0.0, 1.0):
                return None
            return "Input should be a valid boolean" + (", unable to interpret input" if v.is_integer() else "")
        ok = v in (0, 1) if isinstance(v, int) else str(v).strip().lower() in _TRUE_FALSE
        return None if ok else "Input should be a valid boolean, unable to interpret input"
    if isinstance(v, str):
        try:
            number = float(v)
        except ValueError:
            number = None
        if number is None or (base == "int" and not number.is_integer()):
            return f"Input should be a valid {noun}, unable to parse string as {'an' if base == 'int' else 'a'} {noun}"
        return None
    if base == "int" and isinstance(v, float) and not v.is_integer():
        return "Input should be a valid integer, got a number with a fractional part"
    return None


def check_keys(rows: Sequence[Sequence[str]], data: dict) -> None:
    """Refuse, from a schema's reference rows alone (`describe`'s, stored with the package), unknown keys
    and values a plain-typed field (its range included) or a choice of strings surely refuses, so these
    fail before torch is imported; cross-key rules and keys under an open mapping are `build`'s."""
    types = {r[0]: r[1] for r in rows}
    leaves = {r[0] for r in rows}
    sections: dict[str, list[str]] = {"": []}  # each section's names, in field order
    for r in rows:
        parts = r[0].split(".")
        for i in range(len(parts)):
            names = sections.setdefault(".".join(parts[:i]), [])
            if parts[i] not in names:
                names.append(parts[i])
    lines: list[str] = []

    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            key = f"{prefix}{k}"
            if key in leaves:
                why = _refused(types[key], v)
                if why:
                    lines.append(f"{key}: {why} (got {v!r})")
                continue
            if key in sections:
                if isinstance(v, dict):
                    walk(v, key + ".")
                continue
            lines.append(_unknown(key, v, sections[prefix[:-1]], lambda x: x in leaves))

    walk(data, "")
    if lines:
        raise ConfigError("invalid config: " + "; ".join(lines))


def ignored_unless(section: object, prefix: str, keys: list[str], condition: bool, unless: str) -> None:
    """Refuse values that would silently do nothing: unless `condition` holds, each of `keys` of `section`
    (a schema section, which a caller may type by the keys it reads) must keep its default. Raises
    ValueError (inside a validator) naming the key and what would make it count."""
    if not isinstance(section, BaseModel):
        raise TypeError(f"ignored_unless reads a schema section's defaults, and was given a {type(section).__name__}")
    if condition:
        return
    for k in keys:
        value = getattr(section, k)
        if value != type(section).model_fields[k].get_default(call_default_factory=True):
            raise ValueError(f"{prefix}.{k}={value!r} has no effect unless {unless}; remove it, or set {unless}")


def describe(schema: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, doc) rows for the config reference."""
    rows = []
    for name, f in schema.model_fields.items():
        key = f"{prefix}{name}"
        ann = f.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            rows += describe(ann, key + ".")
            continue
        if get_origin(ann) is Literal:  # its choices, which the reference shows and `check_keys` reads
            tname = f"Literal[{', '.join(map(repr, get_args(ann)))}]"
        else:
            tname = getattr(ann, "__name__", str(ann)).replace("typing.", "")
        bounds = [
            f"{op} {getattr(m, attr)}"
            for m in f.metadata
            for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))
            if hasattr(m, attr)
        ]
        if bounds:  # the range, shown and checked (`check_keys`) like the type
            tname += f" ({', '.join(bounds)})"
        default = "" if f.is_required() else repr(f.get_default(call_default_factory=True))
        rows.append((key, tname, default, f.description or ""))
    return rows


def load_object(spec: str) -> Any:
    """The object a `module:name[.attr]` spec names."""
    mod, _, name = spec.partition(":")
    out = importlib.import_module(mod)
    for part in name.split("."):
        out = getattr(out, part)
    return out


@cache
def schema_of(cls: Any) -> type[Schema]:
    """The pydantic schema of a config class: itself, or for a dataclass a `Schema` with its fields (unknown
    keys refused, values validated and converted as pydantic does)."""
    if issubclass(cls, BaseModel):
        return cls
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {
        f.name: (
            hints[f.name],
            f.default if f.default_factory is dataclasses.MISSING else Field(default_factory=f.default_factory),
        )
        for f in dataclasses.fields(cls)
        if f.init
    }
    return create_model(cls.__name__, __base__=Schema, **fields)


class Parser(argparse.ArgumentParser):
    """The parser of a verb or of one of its sub-commands (`command`). With `schema` (a config class, or the
    `module:Class` spec of one, imported only when the config is read), it takes the settings as
    `[CONFIG.yaml] [key=value ...]` and `--print-config`; flags are for what is not config (files to read or
    write, --json, --no-progress, ...). `renamed` maps a removed flag to the form that replaced it, with `{}`
    for its value (`{"--seeds": "seeds={}"}`): `parse` refuses the old form naming the new one."""

    def __init__(
        self, *args: Any, schema: type | str | None = None, renamed: Mapping[str, str] | None = None, **kw: Any
    ):
        super().__init__(*args, **kw)
        self.schema = schema
        self.renamed = dict(renamed or {})
        self.subcommands: argparse._SubParsersAction | None = None
        if schema is not None:
            self.add_argument("config", nargs="?", metavar="CONFIG.yaml", help="YAML config; omit for the defaults")
            self.add_argument(
                "overrides",
                nargs="*",
                metavar="key=value",
                help="overrides of config keys, anywhere among the flags (--print-config shows every key)",
            )
            self.add_argument("--print-config", action="store_true", help="print the resolved config and exit")

    def command(self, name: str, help: str, **kw: Any) -> Parser:
        """A sub-command, `PROG NAME ...`, parsed by a parser of its own (the keywords are `Parser`'s)."""
        if self.subcommands is None:
            self.subcommands = self.add_subparsers(dest="cmd", required=True, parser_class=Parser)
        kw.setdefault("description", help)
        return self.subcommands.add_parser(name, help=help, **kw)


def parse(p: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """Parse a verb's arguments, before its module (and torch) is imported: a sub-command's by its own parser
    (`a.cmd` names it); overrides may come anywhere among the flags, and a first positional that is one is
    one; a removed flag (`Parser.renamed`) is a one-line error naming what replaced it."""
    sub = getattr(p, "subcommands", None)
    if sub is not None:
        if not argv or argv[0] not in sub.choices:
            p.parse_args(argv)  # --help, or argparse's error naming the sub-commands
            p.error(f"give the sub-command first: {p.prog} {{{','.join(sub.choices)}}} ...")
        a = parse(sub.choices[argv[0]], argv[1:])
        a.cmd = argv[0]
        return a
    renamed = getattr(p, "renamed", {})
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in renamed:
            value = value if eq else argv[i + 1] if i + 1 < len(argv) else "VALUE"
            raise UserError(f"{flag} {value} is no longer accepted: use {renamed[flag].format(value)}")
    a = p.parse_intermixed_args(argv)
    schema = getattr(p, "schema", None)
    if schema is not None:
        if a.config and "=" in a.config and not a.config.endswith((".yaml", ".yml")):
            a.config, a.overrides = None, [a.config, *a.overrides]
        a.schema = schema
    a.command = p.prog
    return a


def from_args(a: argparse.Namespace, defaults: dict | None = None) -> Any:
    """The config of a sub-command's parsed arguments (`parse`): the CONFIG file over `defaults`, then the
    overrides; unknown keys and surely-bad values refused by `check_keys`, as a verb's are (a sub-command's
    schema is light: importing it imports no torch)."""
    cls = load_object(a.schema) if isinstance(a.schema, str) else a.schema
    rows = describe(schema_of(cls))
    data = apply_overrides({**(defaults or {}), **read_data(a.config)}, as_written(rows, a.overrides))
    check_keys(rows, data)
    cfg = build(schema_of(cls), data)
    return cfg if isinstance(cfg, cls) else cls(**dict(cfg))


def as_written(rows: Sequence[Sequence[str]], overrides: list[str]) -> list[str]:
    """The overrides, where a key that takes a string (reference `rows`) keeps a word YAML reads as a
    boolean as written: `compile_baseline=off` is 'off', not False."""
    text = {r[0] for r in rows if r[1].startswith("Literal[") or r[1].removesuffix(" | None") == "str"}
    out = []
    for item in overrides:
        key, _, raw = item.partition("=")
        out.append(f"{key}={json.dumps(raw)}" if key in text and isinstance(parse_override(item)[1], bool) else item)
    return out


def print_config(cfg: Any) -> int:
    """Print a config (`--print-config`) as YAML; 0, the exit code."""
    data = (
        cfg.model_dump(mode="json") if isinstance(cfg, BaseModel) else json.loads(json.dumps(dataclasses.asdict(cfg)))
    )
    print(yaml.safe_dump(data, sort_keys=False), end="")
    return 0
