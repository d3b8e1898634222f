"""Every training verb makes the same update on packed micro-batches as on padded ones (`loss.pack`): the
same gradient (the policy's and the critic's), method state and metrics, to float rounding; teachers, the
reference and the critic score packed rows too."""

import asyncio
import copy
import sys
from pathlib import Path

import pytest
import torch

from tempering.models import char_tokenizer, packing, save_policy, tiny_model
from tempering.recipes.runner import trainer
from tempering.rollout.engine import RolloutStats
from tempering.types import Group

sys.path.insert(0, str(Path(__file__).parents[1] / "distributed"))
import verb_worker

pytestmark = pytest.mark.slow


def test_every_verb_makes_the_padded_update_on_packed_micro_batches(pretrained_dir, tmp_path, monkeypatch):
    fresh = save_policy(tiny_model("tiny-xs", seed=7), char_tokenizer(), tmp_path / "fresh")
    t = trainer("train", verb_worker.base(pretrained_dir, tmp_path / "roll"))
    groups = asyncio.run(t.collector.rollout(t.sampler, RolloutStats()))
    for i, g in enumerate(groups):  # a spread of rewards in every group: each case makes a real update
        for j, e in enumerate(g.episodes):
            e.reward = float((i + j) % 3 == 0)
    groups.append(Group(groups[0].task, [copy.deepcopy(groups[0].episodes[0]) for _ in range(4)]))
    torch.save(groups, tmp_path / "groups.pt")
    packs = []  # every packed forward builds its mask
    mask = packing.Packing.mask
    monkeypatch.setattr(packing.Packing, "mask", lambda p, model: packs.append(p) or mask(p, model))
    for case in verb_worker.CASES:
        run = lambda pack: verb_worker.run(
            str(tmp_path / "groups.pt"),
            pretrained_dir,
            str(fresh),
            tmp_path / f"{pack}",
            cases=[case],
            loss={"pack": pack},
        )[case]
        want = run(False)
        assert not packs, case
        got = run(True)
        assert packs, f"{case}: no packed forward"
        packs.clear()
        assert set(got["grads"]) == set(want["grads"]), case
        assert max(float(g.abs().max()) for g in want["grads"].values()) > 1e-4, case  # a real update
        for k, g in want["grads"].items():
            torch.testing.assert_close(got["grads"][k], g, atol=2e-6, rtol=1e-4, msg=f"{case}: {k}")
        assert got["state"] == pytest.approx(want["state"], rel=1e-6), case
        for k, v in want["metrics"].items():
            assert got["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-6), (case, k)
