"""One rank of the data-parallel checks; launched by the tests with torchrun (2 CPU ranks, gloo).

Each rank trains on its own uneven share of one fixed batch and rank 0 saves the updated weights, so
the test can compare them with one process training on the whole batch.
"""

import sys

import torch

from tempering.algos.losses import LossNorm
from tempering.train.parallel import DataParallel, wrap_model
from tempering.train.world import init_world
from tempering.models import tiny_model
from tempering.models.io import full_state_dict
from tempering.train.batch import collate
from tempering.train.update import UpdateSettings, policy_update
from tempering.types import Episode, Task, Turn

SPLIT = 5
"""Rank 0 trains rows 0..4, rank 1 rows 5..7: uneven row and token counts."""


def episodes() -> list[Episode]:
    g = torch.Generator().manual_seed(0)
    eps = []
    for i in range(8):
        prompt = torch.randint(4, 16, (3 + i % 3,), generator=g).tolist()
        n = 1 + (i * 5) % 7
        turns = [Turn(torch.randint(4, 16, (n,), generator=g).tolist(), [-2.0] * n)]
        eps.append(Episode(Task(str(i), ""), prompt, turns))
    return eps


def full_batch():
    batch = collate(episodes(), pad_id=0)
    batch.adv_BT = torch.linspace(-1.0, 1.5, batch.size)[:, None] * batch.mask_BT
    return batch


def settings(agg: str, clip: float, dp=None, mini_batches: int = 1) -> UpdateSettings:
    return UpdateSettings(
        micro_batch_size=2,
        loss_agg=agg,
        max_grad_norm=clip,
        max_response_len=12,
        mini_batches=mini_batches,
        data_parallel=dp,
    )


def update(model, batch, s: UpdateSettings) -> dict:
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.5)
    return policy_update(model, opt, None, batch, s)


class LocalNorm(DataParallel):
    """The classic bug, as a control: each rank normalises by its own counts."""

    def loss_norm(self, mask_BT, max_len=None):
        return LossNorm.of(mask_BT, max_len)


CASES = [("ddp", "token-mean", 0.05), ("ddp", "seq-mean-token-mean", 1e9), ("fsdp2", "token-mean", 0.05)]
"""(strategy, loss aggregation, gradient clip): clip 0.05 is active, so the global gradient norm is checked."""


def main(out: str) -> None:
    world = init_world("gloo", expected_size=2)
    batch = full_batch()
    rows = slice(0, SPLIT) if world.rank == 0 else slice(SPLIT, batch.size)
    mine = batch.select(rows)
    results = {}
    for strategy, agg, clip in CASES:
        for name, dp_cls in (("global", DataParallel), ("local", LocalNorm)):
            model = wrap_model(tiny_model("tiny-xs", seed=0), strategy, world)
            dp = dp_cls(world)
            stats = dp.reduce(update(model, mine, settings(agg, clip, dp)))
            weights = {k: v.detach().clone() for k, v in full_state_dict(model).items()}
            results[(strategy, agg, clip, name)] = {"weights": weights, "stats": stats}
    if world.rank == 0:
        torch.save(results, out)


if __name__ == "__main__":
    main(sys.argv[1])
    torch.distributed.destroy_process_group()
