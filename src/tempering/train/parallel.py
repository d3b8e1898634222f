"""Data-parallel training: wrap the policy (DDP or FSDP2) and keep the loss normalisation global.

The one loop (`train/loop.py`) talks to its ranks through a `Ranks` object: `Solo` for one process,
`DataParallel` under torchrun. Each rank holds its own share of the batch (whole groups, so credit
stays local). DDP and FSDP both
*average* gradients over ranks, so each rank divides its summed loss by (global count / world size):
the average of the ranks' gradients is then exactly the gradient of (global sum / global count), the
same update one process makes on the whole batch. Counting per rank instead is the bug the GRPO note
warns about (ranks with short answers would weigh more).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from tempering.algos.losses import LossNorm
from tempering.errors import UserError
from tempering.train.batch import TrainBatch
from tempering.train.world import World

STRATEGIES = ("ddp", "fsdp2")
SUMMED_METRICS = (
    "env_calls",
    "env_errors",
    "scorer_errors",
    "user_errors",
    "cf_env_calls",
    "episodes_pruned",
    "groups",
    "groups_expanded",
    "groups_pruned",
    "loss_tokens",
)
"""Metrics that count events: summed over ranks. The others are means, weighted by each rank's share.
(Loss terms such as `policy_loss` are shares of the global loss divided by the world size, so their
mean over ranks is the global value.)"""

T = TypeVar("T")


class Solo:
    """One process: the `DataParallel` interface with no collectives."""

    size, rank, is_main = 1, 0, True
    device = None

    def reduce(self, metrics: dict[str, Any], weight: float = 1.0) -> dict[str, Any]:
        return dict(metrics)

    def reduce_all(self, parts: list[tuple[dict[str, Any], float]]) -> list[dict[str, Any]]:
        return [dict(m) for m, _ in parts]

    def once(self, fn: Callable[[], T]) -> T:
        return fn()

    def share(self, obj: Any) -> Any:
        return obj

    def gather(self, obj: Any) -> list[Any]:
        return [obj]

    def barrier(self) -> None:
        pass


class DataParallel:
    """The ranks of a torchrun launch: what `policy_update` needs (`UpdateSettings.data_parallel`)
    and what the loop needs (metrics reduced over ranks, work done once on rank 0)."""

    def __init__(self, world: World):
        self.world = world
        self.size, self.rank, self.is_main = world.size, world.rank, world.is_main
        self.device = world.device

    def loss_norm(self, mask_BT: torch.Tensor, max_len: float | None = None) -> LossNorm:
        """The step's `LossNorm` counted over all ranks, divided by the world size (see module doc)."""
        counts = torch.tensor(
            [float(mask_BT.sum()), float((mask_BT.sum(-1) > 0).sum())], dtype=torch.float64, device=self._dev
        )
        dist.all_reduce(counts)
        if max_len is None:
            longest = torch.tensor([float(mask_BT.shape[-1])], dtype=torch.float64, device=self._dev)
            dist.all_reduce(longest, op=dist.ReduceOp.MAX)
            max_len = float(longest)
        w = self.world.size
        return LossNorm(
            tokens=max(float(counts[0]), 1.0) / w,
            seqs=max(float(counts[1]), 1.0) / w,
            max_len=float(max_len),
            world=float(w),
        )

    def even_out(self, batch: TrainBatch) -> TrainBatch:
        """Pad this rank's batch with loss-free rows up to the largest rank's row count, so that every
        rank runs the same number of micro-batches (each forward/backward is a collective)."""
        rows = torch.tensor([batch.size], device=self._dev)
        dist.all_reduce(rows, op=dist.ReduceOp.MAX)
        extra = int(rows) - batch.size
        if extra == 0:
            return batch
        out: dict[str, Any] = {}
        for f in fields(batch):
            v = getattr(batch, f.name)
            if isinstance(v, dict):  # method-specific per-token tensors
                out[f.name] = {k: _pad_rows(t, extra) for k, t in v.items()}
            else:
                out[f.name] = None if v is None else _pad_rows(v, extra, f.name)
        return TrainBatch(**out)

    def reduce(self, metrics: dict[str, Any], weight: float = 1.0) -> dict[str, Any]:
        """Every rank's metrics combined (the same on all ranks): counters summed, the others averaged
        with each rank's `weight` (e.g. its episodes or loss tokens), so a mean over uneven shares is
        the mean over the whole batch."""
        return self.reduce_all([(metrics, weight)])[0]

    def reduce_all(self, parts: list[tuple[dict[str, Any], float]]) -> list[dict[str, Any]]:
        """`reduce` of several (metrics, weight) parts in one collective, each combined on its own."""
        mine = [(float(w), {k: float(v) for k, v in m.items() if isinstance(v, (int, float))}) for m, w in parts]
        gathered: list[Any] = [None] * self.world.size
        dist.all_gather_object(gathered, mine)
        return [_combine(m, [ranks[i] for ranks in gathered]) for i, (m, _) in enumerate(parts)]

    def once(self, fn: Callable[[], T]) -> T:
        """`fn()` run on rank 0 only; every rank gets its result."""
        shared: T = self.share(fn() if self.world.is_main else None)
        return shared

    def share(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world.size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        dist.barrier()

    @property
    def _dev(self) -> torch.device:
        return self.world.device


def _combine(metrics: dict[str, Any], gathered: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """One part's (weight, values) of every rank, combined (see `DataParallel.reduce`)."""
    out: dict[str, Any] = dict(metrics)
    for k in dict.fromkeys(k for _, m in gathered for k in m):  # every rank's keys, in order
        vals = [(w, m[k]) for w, m in gathered if k in m]
        if k in SUMMED_METRICS:
            out[k] = sum(v for _, v in vals)
        elif sum(w for w, _ in vals) > 0:
            out[k] = sum(w * v for w, v in vals) / sum(w for w, _ in vals)
        else:
            out[k] = sum(v for _, v in vals) / len(vals)
    return out


def _pad_rows(v: torch.Tensor, extra: int, name: str = "") -> torch.Tensor:
    pad = torch.zeros((extra, *v.shape[1:]), dtype=v.dtype, device=v.device)
    if name == "attention_BT":
        pad[:, 0] = 1  # one visible token: a fully masked row can give NaN attention
    elif name == "turn_BT":
        pad.fill_(-1)
    return torch.cat([v, pad])


def wrap_model(model: torch.nn.Module, strategy: str, world: World) -> torch.nn.Module:
    """The module to train: DDP (a full replica per rank) or FSDP2 (parameters sharded over ranks).

    DDP returns a wrapper around `model` (whose own parameters stay full, so it can still sample);
    FSDP2 shards `model` in place (each decoder layer, then the root) and returns it.
    """
    if strategy not in STRATEGIES:
        raise UserError(f"unknown data-parallel strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    model.to(world.device)
    if strategy == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = [world.device.index] if world.device.type == "cuda" else None
        # buffers (rotary tables) are identical on every rank: no broadcast before each forward
        # (torch >= 2.12 names the switch `forward_sync_buffers`)
        params = inspect.signature(DistributedDataParallel.__init__).parameters
        no_sync: dict[str, Any] = (
            {"forward_sync_buffers": False} if "forward_sync_buffers" in params else {"broadcast_buffers": False}
        )
        return DistributedDataParallel(model, device_ids=ids, **no_sync)
    try:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    except ImportError as e:
        raise UserError(
            f"strategy fsdp2 needs torch >= 2.6 (fully_shard); this is torch {torch.__version__}: "
            "upgrade torch or use strategy ddp"
        ) from e
    mesh = init_device_mesh(world.device.type, (world.size,))
    for layer in _decoder_layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks of a Hugging Face causal LM (sharded one by one to bound peak memory)."""
    for path in (
        "model.layers",
        "transformer.h",
        "gpt_neox.layers",
        "model.decoder.layers",
        "base_model.model.model.layers",
    ):
        node: Any = model
        for part in path.split("."):
            node = getattr(node, part, None)
            if node is None:
                break
        if isinstance(node, torch.nn.ModuleList):
            return list(node)
    return []
