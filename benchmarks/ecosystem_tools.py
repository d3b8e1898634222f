"""The `tools` part of benchmarks/ecosystem.py: tool-call parsing and malformed calls, measured on
text that real chat templates and a real model wrote.

- rendered: random calls to the tools of `Desk` (1-3 per answer, arguments with quotes, newlines,
  unicode, lists), rendered as assistant `tool_calls` by every chat template TRL ships whose format
  is Hermes / Qwen JSON inside `<tool_call>` tags; each answer parsed by `parse_tool_calls` and
  compared with the calls rendered;
- sampled: SmolLM2-135M-Instruct (the packaged model) answering tool prompts rendered with Qwen2.5's
  template (TRL's copy), each answer begun with `<tool_call>` and `{"name": "` (the model writes the
  rest of the call; by itself it opened none in 48 answers); each answer parsed by ours and by
  transformers' `parse_response` with the response template TRL sets for that chat template;
- malformed: the rendered calls perturbed (cut JSON, no closing tag, single quotes, a trailing comma,
  an unknown tool, a missing, extra or mistyped argument, arguments that are no object), and the
  sampled answers the reference parser refuses or whose calls cannot run (an unknown tool, or
  arguments that fail the schema, checked with the `jsonschema` package); each answer goes through the tool
  environment's `step`: handled when it returns (no exception), the answer is a `tool_error`, every
  malformed call is counted and answered with an `error:` tool message, and the episode goes on.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from tempering.envs.tools import ToolCall, ToolFamily, parse_tool_calls, tool_schemas


class Desk:
    """Tools of a small office desk; the reward reads how much was added."""

    def __init__(self):
        self.total, self.flags, self.searches = 0, {}, []

    def add(self, n: int) -> int:
        """Add to the running total.

        Args:
            n: how much to add
        """
        self.total += n
        return self.total

    def search(self, query: str, limit: int = 5) -> list:
        """Search the notes.

        Args:
            query: words to look for
            limit: most results to return
        """
        self.searches.append(query)
        return [f"note {i} about {query}" for i in range(min(limit, 2))]

    def set_flags(self, names: list[str], on: bool) -> dict:
        """Turn flags on or off.

        Args:
            names: the flags
            on: the new state
        """
        for n in names:
            self.flags[n] = on
        return dict(self.flags)


def desk_reward(completions, environments, target, **columns):
    return [float(env.total == int(t)) for env, t in zip(environments, target)]


WORDS = ["weather", 'say "hi"', "naïve café", "line\nbreak", "tab\there", "50% off", "{braces}", "</tool_call>"]


def random_call(rng: random.Random) -> dict[str, Any]:
    kind = rng.choice(["add", "search", "set_flags"])
    if kind == "add":
        args: dict[str, Any] = {"n": rng.randint(-50, 50)}
    elif kind == "search":
        args = {"query": rng.choice(WORDS)}
        if rng.random() < 0.5:
            args["limit"] = rng.randint(1, 9)
    else:
        args = {"names": rng.sample(["a", "b", "dark mode", "ß"], rng.randint(0, 3)), "on": rng.random() < 0.5}
    return {"name": kind, "arguments": args}


def hermes_templates() -> dict[str, str]:
    """TRL's shipped chat templates (not the training variants) that render a call as JSON with a
    `name` inside `<tool_call>` tags."""
    import trl

    from tempering.models.toy_qwen import bpe_tokenizer

    tok = bpe_tokenizer(["probe"], 300)
    out = {}
    folder = Path(trl.__file__).parent / "chat_templates"
    for path in sorted(folder.glob("*.jinja")):
        if path.stem.endswith("_training"):
            continue
        tok.chat_template = path.read_text()
        probe = [{"type": "function", "function": {"name": "probe", "arguments": {"x": 1}}}]
        msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": probe}]
        try:
            text = tok.apply_chat_template(msgs, tokenize=False)
        except Exception as e:  # a template that needs what this probe lacks (images, ...) is not counted
            print(
                f"chat template {path.stem} left out: it cannot render the probe ({type(e).__name__}: {e})",
                file=sys.stderr,
            )
            continue
        if "<tool_call>" in text and '"name": "probe"' in text:
            out[path.stem] = path.read_text()
    return out


def _answer_text(tok, msgs: list[dict], calls: list[dict], content: str) -> str | None:
    """The assistant's part of a rendering: the text after the generation prompt."""
    prefix = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    tool_calls = [{"type": "function", "function": c} for c in calls]
    full = tok.apply_chat_template(
        msgs + [{"role": "assistant", "content": content, "tool_calls": tool_calls}], tokenize=False
    )
    return full[len(prefix) :] if full.startswith(prefix) else None


def rendered(n: int, rng: random.Random) -> tuple[dict, list[str]]:
    from tempering.models.toy_qwen import bpe_tokenizer

    tok = bpe_tokenizer(["probe"], 300)
    per: dict[str, dict] = {}
    answers: list[str] = []
    msgs = [{"role": "user", "content": "Use the tools."}]
    for name, template in hermes_templates().items():
        tok.chat_template = template
        calls_n = equal = unrendered = 0
        wrong: list = []
        for _ in range(n):
            calls = [random_call(rng) for _ in range(rng.randint(1, 3))]
            content = rng.choice(["", "Let me check.", "I'll call the tools."])
            try:
                text = _answer_text(tok, msgs, calls, content)
            except Exception:
                text = None
            if text is None:
                unrendered += 1
                continue
            got = parse_tool_calls(text)
            calls_n += len(calls)
            ok = [c for c in got if isinstance(c, ToolCall)]
            same = (
                sum(1 for i, c in enumerate(calls) if i < len(ok) and ok[i] == ToolCall(c["name"], c["arguments"]))
                if len(got) == len(calls)
                else 0
            )
            equal += same
            if same < len(calls) and len(wrong) < 2:
                wrong.append({"text": text[:300], "parsed": [str(c) for c in got]})
            answers.append(text)
        per[name] = {"calls": calls_n, "equal": equal, "unrendered": unrendered, "disagreements": wrong}
    return per, answers


PERTURB = {
    "cut_json": lambda j, r: j[: r.randint(1, max(1, len(j) - 2))],
    "single_quotes": lambda j, r: j.replace('"', "'"),
    "trailing_comma": lambda j, r: j[:-1] + ", }" if j.endswith("}") else j + ",",
    "missing_brace": lambda j, r: j[:-1],
    "unknown_tool": lambda j, r: json.dumps({**json.loads(j), "name": "delete_everything"}),
    "missing_argument": lambda j, r: json.dumps({**json.loads(j), "arguments": {}}),
    "extra_argument": lambda j, r: json.dumps({**json.loads(j), "arguments": {**json.loads(j)["arguments"], "zz": 1}}),
    "wrong_type": lambda j, r: json.dumps(
        {
            **json.loads(j),
            "arguments": {k: [v] if not isinstance(v, list) else "x" for k, v in json.loads(j)["arguments"].items()},
        }
    ),
    "arguments_as_string": lambda j, r: json.dumps(
        {**json.loads(j), "arguments": json.dumps(json.loads(j)["arguments"])}
    ),
    "no_name": lambda j, r: json.dumps({"arguments": json.loads(j)["arguments"]}),
}


def perturbed(n: int, rng: random.Random) -> list[tuple[str, str]]:
    """(kind, answer) pairs: a well-formed call beside one perturbed call, in the Qwen2.5 format;
    `unclosed` leaves a call open with words after it (a whole call that ends the answer is read)."""
    out = []
    kinds = [*PERTURB, "unclosed"]
    for i in range(n):
        kind = kinds[i % len(kinds)]
        good, bad = random_call(rng), random_call(rng)
        if kind in ("missing_argument", "wrong_type", "extra_argument") and not bad["arguments"]:
            bad = {"name": "add", "arguments": {"n": 1}}
        ok = f"<tool_call>\n{json.dumps(good)}\n</tool_call>"
        if kind == "unclosed":
            out.append((kind, f"{ok}\n<tool_call>\n{json.dumps(bad)}\nThen I will check the result."))
            continue
        body = PERTURB[kind](json.dumps(bad), rng)
        out.append((kind, f"{ok}\n<tool_call>\n{body}\n</tool_call>"))
    return out


def _handled(fam: ToolFamily, text: str, want_bad: int | None) -> tuple[bool, str]:
    task = fam.tasks("train", 1)[0]
    env = fam.make_env(task)
    try:
        asyncio.run(env.reset())
        res = asyncio.run(env.step(text))
    except Exception as e:
        return False, f"raised {type(e).__name__}: {e}"
    bad = res.info.get("tool_malformed", 0)
    errors = [m for m in res.messages or [] if m["role"] == "tool" and str(m["content"]).startswith("error:")]
    ok = res.status == "tool_error" and not res.done and bad >= 1 and len(errors) == bad
    if want_bad is not None:
        ok = ok and bad == want_bad
    return ok, f"status {res.status}, malformed {bad}, error messages {len(errors)}"


PREFILL = '<tool_call>\n{"name": "'
"""The start of a call the sampled answers continue: the small model rarely opens one by itself."""


def sampled(n: int, seed: int, max_new_tokens: int = 40) -> dict:
    """SmolLM2's answers to tool prompts, each begun with `PREFILL` (the model writes the rest of the
    call: the tool's name, its arguments, the closing tag), parsed by ours and by the reference parser."""
    import trl
    from trl.chat_template_utils import add_response_schema

    from tempering.models import load_policy
    from tempering.rollout.sampler import HFSampler, SamplingParams

    model, tok = load_policy("smollm2-135m-instruct")
    tok.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    add_response_schema(tok)
    schemas = tool_schemas(Desk())
    asks = [
        "Add {k} to the total.",
        "Search the notes for {w}.",
        "Turn on the flag {w}.",
        "Search for {w}, at most {k} results.",
    ]
    rng = random.Random(seed)
    prompts = []
    for _ in range(n):
        ask = rng.choice(asks).format(k=rng.randint(1, 30), w=rng.choice(["lunch", "tax", "dark mode", "bugs"]))
        msgs = [{"role": "user", "content": ask}]
        prompts.append(tok.apply_chat_template(msgs, tools=schemas, add_generation_prompt=True, tokenize=False))
    contexts = [list(tok.encode(p + PREFILL, add_special_tokens=False)) for p in prompts]
    sampler = HFSampler(model, tok, seed=seed)
    t0 = time.perf_counter()
    samples = sampler.sample(contexts, SamplingParams(max_new_tokens=max_new_tokens, temperature=0.7))
    seconds = time.perf_counter() - t0
    texts = [PREFILL + tok.decode(s.ids, skip_special_tokens=False) for s in samples]
    raw = [tok.decode(s.ids, skip_special_tokens=False) for s in samples]  # what the reference reads
    texts = [PREFILL + tok.decode(s.ids, skip_special_tokens=True) for s in samples]  # what the engine gives
    by_name = {sc["function"]["name"]: sc for sc in schemas}
    tagged = calls = equal = refused = invalid = 0
    malformed_answers, disagreements = [], []
    for prompt, answer, text in zip(prompts, raw, texts):
        ours = parse_tool_calls(text)
        tagged += "<tool_call>" in text
        try:
            ref = tok.parse_response(PREFILL + answer, prefix=prompt).get("tool_calls") or []
            ref = [(c["function"]["name"], c["function"].get("arguments", {})) for c in ref]
        except ValueError:
            ref = None
        if ref is None:
            refused += 1
        else:
            for i, (name, args) in enumerate(ref):
                if not isinstance(args, dict):
                    continue
                calls += 1
                same = len(ours) == len(ref) and ours[i] == ToolCall(name, args)
                equal += same
                if not same and len(disagreements) < 3:
                    disagreements.append({"text": text[:300], "ours": [str(c) for c in ours], "reference": ref})
        bad = ref is None or any(_invalid(name, args, by_name) for name, args in ref)
        invalid += ref is not None and bad
        if bad:
            malformed_answers.append(text)
    return {
        "model": "smollm2-135m-instruct",
        "template": "qwen2_5 (TRL's copy)",
        "answers": n,
        "prefill": PREFILL,
        "max_new_tokens": max_new_tokens,
        "temperature": 0.7,
        "seconds": round(seconds, 1),
        "answers_with_a_tool_call_tag": tagged,
        "reference_calls": calls,
        "equal": equal,
        "reference_refused": refused,
        "reference_read_but_invalid": invalid,
        "disagreements": disagreements,
        "_malformed_answers": malformed_answers,
    }


def _invalid(name: str, args: Any, by_name: dict) -> bool:
    """Whether a call the reference parser read cannot run, by the `jsonschema` package: an unknown
    tool, or arguments that fail the tool's parameter schema (no arguments beyond those it names)."""
    import jsonschema

    if name not in by_name or not isinstance(args, dict):
        return True
    params = {**by_name[name]["function"].get("parameters", {"type": "object"}), "additionalProperties": False}
    try:
        jsonschema.validate(args, params)
    except jsonschema.ValidationError:
        return True
    return False


def measure(n_rendered: int = 100, n_perturbed: int = 440, n_sampled: int = 64, seed: int = 0) -> dict:
    rng = random.Random(seed)
    per_template, _ = rendered(n_rendered, rng)
    sample = sampled(n_sampled, seed)
    refused = sample.pop("_malformed_answers")
    # a target no call reaches: a success would end the episode before the malformed call's answer counts
    fam = ToolFamily(Desk, [{"prompt": "Use the tools.", "target": 10**9}], desk_reward, heldout_share=0.0)
    kinds: dict[str, dict] = {}
    failures = []
    for kind, text in perturbed(n_perturbed, rng):
        ok, why = _handled(fam, text, want_bad=1)
        k = kinds.setdefault(kind, {"cases": 0, "handled": 0})
        k["cases"] += 1
        k["handled"] += ok
        if not ok and len(failures) < 5:
            failures.append({"kind": kind, "text": text[:300], "got": why})
    k = kinds.setdefault("sampled", {"cases": 0, "handled": 0})
    for text in refused:
        ok, why = _handled(fam, text, want_bad=None)
        k["cases"] += 1
        k["handled"] += ok
        if not ok and len(failures) < 8:
            failures.append({"kind": "sampled", "text": text[:300], "got": why})
    calls = sum(t["calls"] for t in per_template.values()) + sample["reference_calls"]
    equal = sum(t["equal"] for t in per_template.values()) + sample["equal"]
    cases = sum(k["cases"] for k in kinds.values())
    handled = sum(k["handled"] for k in kinds.values())
    return {
        "calls_parsed": equal / calls if calls else 0.0,
        "calls": calls,
        "calls_equal": equal,
        "malformed_handled": handled / cases if cases else 0.0,
        "malformed_cases": cases,
        "malformed_handled_count": handled,
        "templates": per_template,
        "sampled": sample,
        "malformed": kinds,
        "malformed_failures": failures,
        "seed": seed,
    }


def render(t: dict) -> list[str]:
    s = t["sampled"]
    rows = [f"| {n} | {v['calls']} | {v['equal']} | {v['unrendered']} |" for n, v in t["templates"].items()]
    kinds = [f"| {n} | {v['cases']} | {v['handled']} |" for n, v in t["malformed"].items()]
    return [
        "## tools (task.family=tools)",
        "",
        f"- calls parsed: {t['calls_parsed']:.4f} ({t['calls_equal']} of {t['calls']} well-formed calls read exactly: "
        "name and arguments)",
        f"- malformed handled: {t['malformed_handled']:.4f} ({t['malformed_handled_count']} of {t['malformed_cases']} "
        "answers with a malformed call: a `tool_error` turn, each malformed call counted and answered with an "
        "`error:` tool message, the episode going on)",
        "",
        "Calls rendered as assistant `tool_calls` by TRL's chat templates (Hermes / Qwen JSON in `<tool_call>` tags):",
        "",
        "| template | calls | read exactly | answers the template could not render |",
        "|---|---|---|---|",
        *rows,
        "",
        f"{s['model']} answering {s['answers']} tool prompts ({s['template']}; each answer begun with "
        f"`{json.dumps(s['prefill'])[1:-1]}`, the model writing the rest of the call; temperature {s['temperature']}, "
        f"{s['max_new_tokens']} new tokens, {s['seconds']} s): "
        f"transformers' `parse_response` (TRL's response template) reads {s['reference_calls']} calls with "
        f"object arguments, of which ours reads {s['equal']} the same; it refuses {s['reference_refused']} answers, "
        f"and {s['reference_read_but_invalid']} more hold a call that cannot run (an unknown tool, or arguments "
        "that fail the tool's schema by the `jsonschema` package): these are the `sampled` row below.",
        "",
        "Sampled calls read differently from the reference (ours refuses keys besides `name` and `arguments`; the "
        "reference drops them): " + (json.dumps(s["disagreements"])[:1500] if s["disagreements"] else "none"),
        "",
        "| malformed kind | answers | handled |",
        "|---|---|---|",
        *kinds,
        "",
        "Failures (first few): " + (json.dumps(t["malformed_failures"])[:1500] if t["malformed_failures"] else "none"),
        "",
    ]
