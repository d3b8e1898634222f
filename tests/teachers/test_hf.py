import pytest
import torch

from tempering.errors import UserError
from tempering.models import save_policy
from tempering.teachers import HFTeacher, resolve_model_dir


def _requests(n_prompts=6, per_prompt=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts, resps = [], []
    for i in range(n_prompts):
        p = torch.randint(4, 90, (2 + i % 4,), generator=g).tolist()
        for j in range(per_prompt):
            prompts.append(p)
            resps.append(torch.randint(4, 90, (1 + (3 * i + j) % 6,), generator=g).tolist())
    return prompts, resps


def _naive(model, prompt, resp):
    """One full forward of prompt + response: the distribution behind each response token."""
    logp = model(input_ids=torch.tensor([prompt + resp])).logits[0].float().log_softmax(-1)
    return logp[len(prompt) - 1 : len(prompt) - 1 + len(resp)]


@pytest.mark.parametrize("pack", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("max_logits", [1 << 26, 700])  # one chunk, or many chunks of a few rows
def test_batched_scores_match_one_forward_per_example(tiny, max_logits, pack):
    model, tok = tiny
    prompts, resps = _requests()
    cand = torch.randint(0, len(tok), (len(prompts), 6, 5), generator=torch.Generator().manual_seed(1))
    s = HFTeacher(model, tok, max_logits=max_logits, pack=pack).score(prompts, resps, cand, top_k=4, full=True)
    assert s.token_logp_BC.shape == (len(prompts), 6) and s.top_ids_BCK.shape == (len(prompts), 6, 4)
    with torch.no_grad():
        for b, (p, r) in enumerate(zip(prompts, resps)):
            ref = _naive(model, p, r)
            n = len(r)
            torch.testing.assert_close(
                s.token_logp_BC[b, :n], ref.gather(-1, torch.tensor(r)[:, None]).squeeze(-1), atol=1e-5, rtol=0
            )
            torch.testing.assert_close(s.full_logp_BCV[b, :n], ref, atol=1e-5, rtol=0)
            torch.testing.assert_close(s.cand_logp_BCK[b, :n], ref.gather(-1, cand[b, :n]), atol=1e-5, rtol=0)
            torch.testing.assert_close(s.top_logp_BCK[b, :n], ref.topk(4, -1).values, atol=1e-5, rtol=0)
            assert s.mask_BC[b].tolist() == [1.0] * n + [0.0] * (6 - n)
            assert float(s.token_logp_BC[b, n:].abs().sum()) == 0.0


def test_scoring_a_model_in_training_leaves_it_trainable(tiny):
    model, tok = tiny
    model.train()
    HFTeacher(model, tok).score(*_requests(2, 2))
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_k_larger_than_the_vocabulary_is_refused(tiny):
    model, tok = tiny
    with pytest.raises(UserError, match="larger than the vocabulary"):
        HFTeacher(model, tok).score(*_requests(1, 1), top_k=len(tok) + 1)


def test_teacher_folders(tiny, tmp_path):
    model, tok = tiny
    save_policy(model, tok, tmp_path / "run" / "final")
    assert resolve_model_dir(tmp_path / "run") == tmp_path / "run" / "final"
    assert resolve_model_dir(tmp_path / "run" / "final") == tmp_path / "run" / "final"
    t = HFTeacher.from_path(tmp_path / "run", name="t")
    assert not any(p.requires_grad for p in t.model.parameters())
    with pytest.raises(UserError, match="does not exist"):
        resolve_model_dir(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no model"):
        resolve_model_dir(tmp_path / "empty")
