"""The learning-rate schedules against transformers' own (what TRL's lr_scheduler_type names)."""

import pytest
import torch
from transformers import get_cosine_schedule_with_warmup, get_linear_schedule_with_warmup

from tempering.train.optim import make_scheduler


@pytest.mark.parametrize(
    "schedule,theirs", [("linear", get_linear_schedule_with_warmup), ("cosine", get_cosine_schedule_with_warmup)]
)
def test_decay_after_warmup_is_transformers(schedule, theirs):
    def lrs(make):
        opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        sched, out = make(opt), []
        for _ in range(20):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    ours = lrs(lambda o: make_scheduler(o, 5, 20, schedule, min_lr_ratio=0.0))
    want = lrs(lambda o: theirs(o, 5, 20))
    assert ours[5:] == pytest.approx(want[5:])  # warm-up: ours counts the first step as 1/5, theirs as 0
