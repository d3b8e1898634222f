"""Every training verb on 2 CPU ranks (torchrun, gloo; DDP and FSDP2) makes the update one process makes
on the whole batch: the same gradient, method state and loss, teacher-scoring methods and dynamic
sampling included (tests/distributed/verb_worker.py)."""

import asyncio
import copy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tempering.models import char_tokenizer, save_policy, tiny_model
from tempering.recipes.runner import trainer
from tempering.rollout.engine import RolloutStats
from tempering.types import Group

sys.path.insert(0, str(Path(__file__).parent))
import verb_worker

pytestmark = pytest.mark.slow
WORKER = Path(__file__).parent / "verb_worker.py"


@pytest.fixture(scope="module")
def setup(pretrained_dir, tmp_path_factory):

    root = tmp_path_factory.mktemp("verbs")
    fresh = save_policy(tiny_model("tiny-xs", seed=7), char_tokenizer(), root / "fresh")
    t = trainer("train", verb_worker.base(pretrained_dir, root / "roll"))
    groups = asyncio.run(t.collector.rollout(t.sampler, RolloutStats()))
    # rewards set here, not left to the draw (a group the model answers all right or all wrong has no
    # signal): every rolled-out group has a spread, so each case makes a real update
    for i, g in enumerate(groups):
        for j, e in enumerate(g.episodes):
            e.reward = float((i + j) % 3 == 0)
    # five groups (uneven shares), one of identical episodes: no signal, dropped by dynamic sampling
    groups.append(Group(groups[0].task, [copy.deepcopy(groups[0].episodes[0]) for _ in range(4)]))
    torch.save(groups, root / "groups.pt")
    one = verb_worker.run(str(root / "groups.pt"), pretrained_dir, str(fresh), root / "one")
    return root, pretrained_dir, str(fresh), one


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_every_verb_makes_the_one_process_update_on_two_ranks(setup, strategy):
    root, model, fresh, one = setup
    out = root / f"two-{strategy}.pt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(WORKER)]
    res = subprocess.run(
        [*cmd, str(root / "groups.pt"), model, fresh, str(out), "--strategy", strategy],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert res.returncode == 0, res.stderr[-4000:]
    two = torch.load(out, weights_only=False)
    assert one["train+dynamic_sampling"]["groups"] <= 4  # at least the identical group was dropped
    for case in verb_worker.CASES:
        want, got = one[case], two[case]
        assert set(got["grads"]) == set(want["grads"]), case
        assert max(float(g.abs().max()) for g in want["grads"].values()) > 1e-4, case  # a real update
        for k, g in want["grads"].items():
            torch.testing.assert_close(got["grads"][k], g, atol=2e-6, rtol=1e-4, msg=f"{case}: {k}")
        assert got["state"] == pytest.approx(want["state"], rel=1e-6), case
        for k, v in want["metrics"].items():
            assert got["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-6), (case, k)
