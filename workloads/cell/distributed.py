"""Data-parallel cells: join the launcher's process group, wrap the model in DDP, gather to rank 0.

A cell with `distributed.nodes × distributed.tasks_per_node` > 1 trains as that many processes,
one per GPU (NCCL) or per CPU process (gloo). This module starts no process: a launcher does —
Slurm, one task per process, where the orchestrator's job exports torch's `env://` variables
from the Slurm job (submitit's TorchDistributedEnvironment), or any launcher that sets them the
same way (torchrun). The workload reads only those variables:

    RANK, WORLD_SIZE   this process's place in the group (absent: a process of its own)
    LOCAL_RANK         its index on the node: the CUDA device it trains on
    MASTER_ADDR/PORT   where rank 0's rendezvous store listens (read by torch itself)

Under torch.compile the DDP-wrapped module is compiled, as PyTorch recommends: dynamo's
DDPOptimizer then splits each captured graph at DDP's gradient bucket boundaries, so that
all-reduces can overlap the backward. Those splits are not in dynamo's graph-break counter;
workloads/instruments/dynamo_records.py `DdpSplits` counts them.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from workloads.cell.config import DistributedConfig


class LaunchError(RuntimeError):
    """The processes that were started do not match what the cell asks for."""


@dataclass(frozen=True)
class Ranks:
    """This process's place among the cell's processes (one process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    """The torch.distributed backend once the group is joined; None for a single process."""

    @property
    def is_main(self) -> bool:
        """Rank 0 gathers every rank's measurements and writes the cell's files."""
        return self.rank == 0


def launched_ranks(environ: Mapping[str, str] = os.environ) -> Ranks:
    """The ranks the launcher gave this process (torch's env:// variables); no group joined yet."""
    try:
        ranks = Ranks(
            int(environ.get("RANK", 0)), int(environ.get("WORLD_SIZE", 1)), int(environ.get("LOCAL_RANK", 0))
        )
    except ValueError:
        raise LaunchError(
            f"RANK, WORLD_SIZE and LOCAL_RANK must be integers, got "
            f"{[environ.get(k) for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK')]}"
        ) from None
    if not 0 <= ranks.rank < ranks.world_size:
        raise LaunchError(f"RANK={ranks.rank} is outside WORLD_SIZE={ranks.world_size}")
    return ranks


def join(cfg: DistributedConfig, device_type: str, environ: Mapping[str, str] = os.environ) -> Ranks:
    """Join the process group of the cell's processes; a single process joins none."""
    launched = launched_ranks(environ)
    if launched.world_size != cfg.world_size:
        how = f"WORLD_SIZE={launched.world_size}" if "WORLD_SIZE" in environ else "alone (WORLD_SIZE unset)"
        hint = (
            ": distributed cells run through a Slurm cluster profile, one task per process"
            if cfg.world_size > 1
            else ""
        )
        raise LaunchError(
            f"the cell trains as {cfg.world_size} process(es) (distributed.nodes={cfg.nodes} x "
            f"tasks_per_node={cfg.tasks_per_node}) but this process was started {how}{hint}"
        )
    if cfg.world_size == 1:
        return launched
    backend = cfg.backend if cfg.backend != "auto" else ("nccl" if device_type == "cuda" else "gloo")
    if device_type == "cuda":
        if launched.local_rank >= torch.cuda.device_count():
            raise LaunchError(
                f"LOCAL_RANK={launched.local_rank} but this process sees "
                f"{torch.cuda.device_count()} GPU(s) "
                f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')})"
            )
        torch.cuda.set_device(launched.local_rank)  # NCCL's communicator and every .cuda() use it
    dist.init_process_group(backend, init_method="env://", rank=launched.rank, world_size=launched.world_size)
    return Ranks(launched.rank, launched.world_size, launched.local_rank, backend)


def leave(ranks: Ranks, together: bool = False) -> None:
    """Leave the process group joined by `join` (nothing for a single process). `together`: every
    rank got here after training (then they meet first; a rank that failed may never come).

    The group's threads must end before the interpreter does: a DDP module still holding the group
    (in a reference cycle until the collector runs) would destroy it at interpreter exit, where gloo
    aborts the process ("terminate called without an active exception", seen under load on rank 1
    of a finished cell). So the cycles are collected first, and the ranks leave together."""
    if ranks.backend is None or not dist.is_initialized():
        return
    gc.collect()
    if together:
        dist.barrier()
    dist.destroy_process_group()


def rank_device(ranks: Ranks, device: torch.device) -> torch.device:
    """The device this rank trains on: its LOCAL_RANK-th visible GPU, or the CPU."""
    return torch.device("cuda", ranks.local_rank) if device.type == "cuda" else device


class DataParallel:
    """Wraps the cell's module in DistributedDataParallel when the cell has several ranks (the
    identity otherwise), and keeps the wrapper, whose gradient sync the training step switches."""

    def __init__(self, ranks: Ranks, device: torch.device, cfg: DistributedConfig):
        self.ranks, self.device, self.cfg = ranks, device, cfg
        self.ddp: DistributedDataParallel | None = None

    def __call__(self, module: nn.Module) -> nn.Module:
        if self.ranks.backend is None:
            return module
        kwargs: dict[str, Any] = {}
        if self.cfg.bucket_cap_mb is not None:
            kwargs["bucket_cap_mb"] = self.cfg.bucket_cap_mb
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        self.ddp = DistributedDataParallel(module, device_ids=device_ids, **kwargs)
        return self.ddp

    def sync_gradients(self, sync: bool) -> None:
        """Whether the next backward all-reduces the gradients (a no-op without DDP)."""
        if self.ddp is not None:
            self.ddp.require_backward_grad_sync = sync


def gather(ranks: Ranks, value: Any) -> list[Any]:
    """Every rank's `value`, in rank order, on every rank; a collective: all ranks must call it."""
    if ranks.backend is None:
        return [value]
    gathered: list[Any] = [None] * ranks.world_size
    dist.all_gather_object(gathered, value)
    return gathered
