"""The candidate's side of a function problem (standalone: stdlib only): it runs in a sandbox job of
its own, loads solution.py, and answers the judge's requests. The problem's setup code never runs
here: the judge runs it, and what it builds reaches this job only as the arguments of calls.

Nothing here is trusted: the candidate's code runs in this process and may change any of it. The
judge, in another job, reads what comes out of this job as the candidate's declared output only:
JSON data, decoded without running code.

The job's stdout is the channel to the host (one JSON line per reply); the candidate's own prints go
nowhere. stdin: first {"op": "load"}, then one JSON line per request {"op": "call" | "set" | "get" |
"truth", "target": [...], "args": base64(pickle((args, kwargs))), "name" (set)} (the judge's pickles:
handles on this process's objects come back as `_remote` calls, objects of the problem's own classes as
`_record` calls). The first lines out are {"hello": true}, then {"names": {name: kind}} or
{"load_error": {...}}.
"""

import base64
import collections
import decimal
import fractions
import json
import numbers
import os
import pickle
import sys
import traceback
import types

DEPTH = 100
"""Levels of nesting a value may have to be sent as data."""
SEQ = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset", collections.deque: "deque"}
MAP = {
    dict: "dict",
    collections.Counter: "Counter",
    collections.OrderedDict: "OrderedDict",
    collections.defaultdict: "defaultdict",
}
PLAIN = (int, float, complex, str, bytes, tuple, list, dict, set, frozenset)
refs: list = []
channel = os.fdopen(os.dup(1), "w")
_devnull = os.open(os.devnull, os.O_WRONLY)
os.dup2(_devnull, 1)  # the candidate's prints (and writes to stderr) never reach the channel by accident
os.dup2(_devnull, 2)
LIMIT = int(sys.argv[1])


def send(obj) -> None:
    text = json.dumps(obj)
    if len(text) > LIMIT:
        text = json.dumps({"too_large": len(text)})
    channel.write(text + "\n")
    channel.flush()


def text_of(err: BaseException) -> str:
    try:
        return str(err)[:1000]
    except BaseException:
        return "(a message that cannot be shown)"


def failure() -> dict:
    kind, err, tb = sys.exc_info()
    try:
        frames = [f for f in traceback.extract_tb(tb) if f.filename == "solution.py"]
        text = "".join(traceback.format_list(frames) + traceback.format_exception_only(kind, err)).strip()
        text = "\n".join(text.splitlines()[-10:])
    except BaseException:
        text = f"{getattr(kind, '__name__', 'an exception')} (its message cannot be shown)"
    return {"error": text, "type": getattr(kind, "__name__", ""), "message": text_of(err) if err else ""}


class TooDeep(ValueError):
    pass


def enc(v, depth=0):
    if depth > DEPTH:
        raise TooDeep(f"the value is nested more than {DEPTH} levels deep")
    t = type(v)
    if v is None or t is bool or t is str or t is float or (t is int and -(2**63) < v < 2**63):
        return v
    if t is int:
        return ["int", hex(v)]
    if t is complex:
        return ["complex", repr(v.real), repr(v.imag)]
    if t is bytes:
        return ["bytes", base64.b64encode(v).decode()]
    if t in SEQ:
        return [SEQ[t], [enc(x, depth + 1) for x in v]]
    if t in MAP:
        return [MAP[t], [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]]
    if t is fractions.Fraction:
        return ["Fraction", hex(v.numerator), hex(v.denominator)]
    if t is decimal.Decimal:
        return ["Decimal", str(v)]
    if t is range:
        return ["range", hex(v.start), hex(v.stop), hex(v.step)]
    for base in PLAIN:  # namedtuple, IntEnum, str subclasses: by value, as the plain type
        if isinstance(v, base):
            return enc(base(v), depth + 1)
    if isinstance(v, numbers.Integral):  # numpy integers and the like
        return enc(int(v), depth + 1)
    if isinstance(v, numbers.Real):
        return enc(float(v), depth + 1)
    refs.append(v)
    return ["ref", len(refs) - 1, kind(v)]


def kind(v) -> str:
    """What a handle is, in one of the judge's own words: never the class's name, which the code chose."""
    if isinstance(v, type):
        return "class"
    if isinstance(v, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
        return "generator"
    if isinstance(v, types.ModuleType):
        return "module"
    return "function" if callable(v) else "object"


module = types.ModuleType("__task__")
sys.modules["__task__"] = module
ns = module.__dict__


def resolve(target):
    if target[0] == "name":
        return ns[target[1]]
    if target[0] == "ref":
        return refs[target[1]]
    return getattr(resolve(target[1]), target[2])


def _remote(target):  # the judge pickles its handles on this process's objects as calls to this
    return resolve(target)


records: dict = {}


def _record(name):  # an object of a class of the problem's code: a plain object of a class of its name
    if name not in records:
        records[name] = type(name, (), {})
    return records[name].__new__(records[name])


def main() -> None:
    send({"hello": True})
    sys.stdin.readline()
    try:
        with open("solution.py") as f:
            exec(compile(f.read(), "solution.py", "exec"), ns)
        names = {
            k: "module " + v.__name__ if isinstance(v, types.ModuleType) else "value"
            for k, v in list(ns.items())
            if not k.startswith("__")
        }
    except BaseException:
        send({"load_error": failure()})
        return
    send({"names": names})
    for line in sys.stdin:
        try:
            req = json.loads(line)
            value = resolve(req["target"])
            if req["op"] == "set":
                setattr(value, req["name"], pickle.loads(base64.b64decode(req["args"]))[0][0])
                value = None
            elif req["op"] == "call":
                args, kwargs = pickle.loads(base64.b64decode(req["args"]))
                value = value(*args, **kwargs)
            elif req["op"] == "truth":
                value = bool(value)
        except BaseException:
            send(failure())
            continue
        try:
            reply = {"value": enc(value)}
        except TooDeep as e:
            reply = {"unreadable": str(e)}
        except BaseException as e:
            reply = {"unreadable": f"reading it raised {type(e).__name__}: {text_of(e)[:200]}"}
        send(reply)


main()
