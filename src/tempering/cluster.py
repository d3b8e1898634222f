"""Ray, for the parts of a run that spread over workers (rollout workers, teachers, sandboxes).

One process joins (or starts) Ray once; every Ray-backed component goes through `join_ray`. Needs the
`ray` extra: `pip install 'tempering[ray]'`.
"""

from __future__ import annotations

from typing import Any

from tempering.errors import UserError


def ray_module() -> Any:
    try:
        import ray
    except ImportError as e:
        raise UserError("Ray workers need Ray: pip install 'tempering[ray]'") from e
    return ray


def join_ray(address: str | None = None) -> Any:
    """The `ray` module, joined to the cluster at `address` (None: a running one, else a local one).

    Under torchrun with no address, rank 0 starts one local instance and the other ranks join it, so the
    ranks' workers share one view of the machine's CPUs instead of each assuming all of them."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    import torch.distributed as dist

    if address is None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        if dist.get_rank() == 0:
            ray.init(include_dashboard=False, log_to_driver=False)
        dist.barrier()
        if dist.get_rank() != 0:
            ray.init(address="auto", include_dashboard=False, log_to_driver=False)
        return ray
    ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray


def device_for(num_gpus: float) -> str:
    """Where a worker that reserves `num_gpus` GPUs runs its model."""
    import torch

    return "cuda" if num_gpus > 0 and torch.cuda.is_available() else "cpu"


def split_rows(n: int, parts: int) -> list[slice]:
    """Contiguous, nearly equal slices of range(n) (empty ones dropped)."""
    size, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + size + (i < extra)
        if stop > start:
            out.append(slice(start, stop))
        start = stop
    return out
