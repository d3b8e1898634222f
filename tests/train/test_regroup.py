"""Dynamic sampling scores each collected batch once: the kept groups' scores are taken from their
batches' scores (`Scores.select`, `Scores.join`), and are what scoring the kept groups afresh gives."""

import importlib.util
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tempering.models import tiny_model
from tempering.teachers.base import TeacherScores
from tempering.train.batch import collate
from tempering.train.dynamic import Scored, Selection
from tempering.train.scoring import KLPenalty, OverlongPenalty, ReferenceLogprobs, score

SPEC = importlib.util.spec_from_file_location(
    "composition_matrix", Path(__file__).parents[2] / "examples" / "composition" / "matrix.py"
)
matrix = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(matrix)
SCORERS = [
    ReferenceLogprobs(tiny_model("tiny-xs", seed=0).eval(), micro_batch_size=5),
    KLPenalty(0.1),
    OverlongPenalty(max_new_tokens=8, cache=4),
]


def scored(groups):
    batch = collate([e for g in groups for e in g.episodes], pad_id=0)
    return groups, batch, score(groups, batch, SCORERS)


def test_the_picked_groups_scores_are_those_of_scoring_them_afresh():
    sources = [scored(matrix.groups(1)), scored(matrix.groups(3))]  # one turn and three: K differs
    picks = [(1, 0), (0, 2), (1, 2), (1, 1)]  # out of order, and not as many from each
    kept = [sources[s][0][i] for s, i in picks]
    batch = collate([e for g in kept for e in g.episodes], pad_id=0)
    got = Selection([Scored(g, b, sc, [True] * len(g)) for g, b, sc in sources], picks).scores()
    want = score(kept, batch, SCORERS)
    assert got.task_ids == want.task_ids
    assert got.turns.scores_NGK.shape == want.turns.scores_NGK.shape
    assert got.ref_logp_BT.shape == batch.mask_BT.shape
    for name in ("kl", "overlong"):
        assert torch.allclose(got.terms[name], want.terms[name], atol=1e-6)
    assert torch.allclose(got.turns.shaping, want.turns.shaping, atol=1e-6)
    m = batch.mask_BT > 0
    assert torch.allclose(got.ref_logp_BT[m], want.ref_logp_BT[m], atol=1e-6)
    assert not got.ref_logp_BT[batch.attention_BT == 0].any()  # nothing past a row's end
    for name in ("shaping/kl", "shaping/overlong"):  # the kept groups' own
        assert got.metrics[name] == pytest.approx(want.metrics[name], abs=1e-6)
    n = [len(sc.task_ids) for _, _, sc in sources]  # other metrics: over everything collected
    collected = sum(k * sc.metrics["kl_ref_in_reward"] for k, (_, _, sc) in zip(n, sources)) / sum(n)
    assert got.metrics["kl_ref_in_reward"] == collected  # the same sum, in the same order


def test_only_what_it_can_take_apart_is_selected():
    groups, batch, sc = scored(matrix.groups(1))
    teacher = TeacherScores(torch.zeros_like(batch.mask_BT), batch.mask_BT)
    with pytest.raises(ValueError, match="Scores.select takes"):
        replace(sc, teachers={"t": teacher}).select([0], groups, batch)
