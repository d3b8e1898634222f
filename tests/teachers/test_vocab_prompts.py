import pytest
import torch

from tempering.errors import UserError
from tempering.models import char_tokenizer
from tempering.models.chat import ChatFormat
from tempering.teachers import HFTeacher, check_vocab, load_builder, score_episodes, template_builder
from tempering.train.batch import collate
from tempering.types import Episode, Task, Turn


def test_same_vocabulary_passes_and_a_different_one_names_the_tokens():
    check_vocab(char_tokenizer(), {"teacher": char_tokenizer()})
    other = char_tokenizer()
    other.add_tokens(["<think>"])
    with pytest.raises(
        UserError, match=r"teacher does not share the student's vocabulary \(1 tokens differ: '<think>' only in teacher"
    ):
        check_vocab(char_tokenizer(), {"teacher": other})

    class Swapped:
        def get_vocab(self):
            v = char_tokenizer().get_vocab()
            v["a"], v["b"] = v["b"], v["a"]
            return v

    with pytest.raises(UserError, match="'a' is id .* for the student, .* for ref"):
        check_vocab(char_tokenizer(), {"ref": Swapped()})


TASK = Task(id="t1", prompt="2+3=", answer="5", meta={"hint": "small"})


def test_prompt_templates():
    assert load_builder(None)(TASK) == "2+3="
    assert template_builder("answer {answer}; {prompt}")(TASK) == "answer 5; 2+3="
    assert load_builder("({meta[hint]}) {prompt}")(TASK) == "(small) 2+3="
    assert load_builder("tempering.teachers.prompts:same_prompt")(TASK) == "2+3="
    with pytest.raises(UserError, match="allowed fields"):
        template_builder("{solution} {prompt}")
    with pytest.raises(UserError, match="has no 'tip' in its meta"):
        template_builder("{meta[tip]}")(TASK)
    with pytest.raises(UserError, match="cannot be imported"):
        load_builder("tempering.nothing:here")


def test_scores_land_on_the_batch_positions_with_a_privileged_teacher_prompt(tiny):
    model, tok = tiny
    fmt = ChatFormat(tok)
    tasks = [TASK, Task(id="t2", prompt="10+20=", answer="30")]
    eps = []
    for t, act in zip(tasks * 2, ["5\n", "7", "30\n", "3"]):
        ids = tok.encode(act, add_special_tokens=False)
        eps.append(Episode(t, fmt.prompt_ids(t.prompt), [Turn(ids, [-1.0] * len(ids))]))
    batch = collate(eps, tok.pad_token_id)
    T = batch.input_ids_BT.shape[1]
    build = template_builder("answer {answer}: {prompt}")
    s = score_episodes(HFTeacher(model, tok), eps, fmt, T, build=build, top_k=3)
    assert s.token_logp_BC.shape == (4, T) and s.top_ids_BCK.shape == (4, T, 3)
    assert torch.equal(s.mask_BC, batch.mask_BT)  # single-turn: the continuation is exactly the trained tokens
    with torch.no_grad():
        for b, e in enumerate(eps):
            tp = fmt.prompt_ids(build(e.task))
            act = e.turns[0].action_ids
            logp = model(input_ids=torch.tensor([tp + act])).logits[0].log_softmax(-1)
            want = logp[len(tp) - 1 : -1].gather(-1, torch.tensor(act)[:, None]).squeeze(-1)
            off = len(e.prompt_ids)
            torch.testing.assert_close(s.token_logp_BC[b, off : off + len(act)], want, atol=1e-5, rtol=0)
            assert float(s.token_logp_BC[b, :off].abs().sum()) == 0.0
