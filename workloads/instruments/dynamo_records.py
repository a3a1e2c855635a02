"""What dynamo recorded about a cell's compilation: graphs, graph breaks, recompiles, why, and
which compile caches it hit.

Every private dynamo API that workloads read is used here and nowhere else (dynamo has no public
API for these records; torch 2.11 on the H100 and 2.15 on the CPU machines have them as below):

    torch._dynamo.utils.counters              "stats"/"unique_graphs" (graphs compiled),
                                              "graph_break" (dynamo's message -> times it broke there),
                                              "inductor"/"cudagraph_skips",
                                              "inductor"/"fxgraph_cache_hit|miss|bypass" (FX graph cache),
                                              "aot_autograd"/"autograd_cache_hit|miss|bypass"
                                              (AOTAutograd cache)
    torch._dynamo.utils.get_compilation_metrics()   one record per frame compile; `recompile_reason`
                                              (the guard that failed) is set on a recompile
    torch._dynamo.utils.clear_compilation_metrics(), torch._dynamo.reset()
    torch._dynamo.backends.distributed.DDPOptimizer   `.buckets` of the graph it last compiled
    torch._inductor.runtime.cache_dir_utils.cache_dir()   the inductor cache directory in use (created)
    <inductor cache>/fxgraph/, <inductor cache>/aotautograd/   where those two caches keep entries

A torch that renames one of them fails tests/unit/workloads/test_compile_reasons.py (a real model that
breaks and
recompiles), tests/system/test_compile_cache.py (a real cold and warm compile) or
tests/unit/workloads/test_distributed_ranks.py
(DDP's splits), not a sweep. In a distributed cell these are rank 0's records. `CompileCounters` and
`DdpSplits` are the cell's instruments that record them (workloads/instruments/base.py).

Reasons are recorded as dynamo words them, stripped; a recompile's without its compile id
(`0/1: `), which differs between recompiles for one reason. Identical reasons are counted once
each with how often they occurred: run.parquet's `graph_break_reasons` and `recompile_reasons`.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from workloads.cell.config import BackendConfig
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import PreparedCell
from workloads.instruments.base import Instrument
from workloads.instruments.compile_cache import INDUCTOR_ENV

#: run.parquet's cache columns and the dynamo counters they count. Autotuning has no counter of its
#: own: its results are cached in the inductor directory too, and a compile that hits the FX graph
#: cache autotunes nothing.
CACHE_COUNTERS = {
    "fx_graph_cache_hits": ("inductor", "fxgraph_cache_hit"),
    "fx_graph_cache_misses": ("inductor", "fxgraph_cache_miss"),
    "fx_graph_cache_bypasses": ("inductor", "fxgraph_cache_bypass"),
    "aot_autograd_cache_hits": ("aot_autograd", "autograd_cache_hit"),
    "aot_autograd_cache_misses": ("aot_autograd", "autograd_cache_miss"),
    "aot_autograd_cache_bypasses": ("aot_autograd", "autograd_cache_bypass"),
}
#: The compile id dynamo puts before each failed guard of a recompile reason (`0/1: `, `[0/1] `).
_COMPILE_ID = re.compile(r"^\s*\[?\d+/\d+\]?:?\s*", re.M)


@dataclass
class CompileStats:
    graph_count: int
    graph_break_count: int
    recompile_count: int
    cudagraph_skips: int
    """Compiled graphs that fell back from CUDA graphs (CPU tensors, mutated inputs, ...)."""
    graph_break_reasons: list[dict[str, Any]]
    """{reason, count} per distinct graph-break message, most frequent first."""
    recompile_reasons: list[dict[str, Any]]
    """{reason, count} per distinct recompile reason (failed guards), most frequent first."""
    cache: dict[str, int]
    """CACHE_COUNTERS' columns: lookups of inductor's FX graph cache and of the AOTAutograd cache that
    hit, missed or bypassed the cache (a graph it cannot cache)."""

    def columns(self) -> dict[str, Any]:
        """The run row's columns of what compiled (a training and a GEMM cell alike)."""
        return {
            "graph_count": self.graph_count,
            "graph_break_count": self.graph_break_count,
            "recompile_count": self.recompile_count,
            "cudagraph_skips": self.cudagraph_skips,
            "graph_break_reasons": self.graph_break_reasons,
            "recompile_reasons": self.recompile_reasons,
            **self.cache,
        }


def reset_compile_stats() -> None:
    """Forget earlier compilations (counters, caches) so that stats describe this cell alone."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch._dynamo.utils.clear_compilation_metrics()


def _counted(counts: Counter) -> list[dict[str, Any]]:
    return [{"reason": reason, "count": int(count)} for reason, count in counts.most_common() if reason]


def compile_stats() -> CompileStats:
    """Graphs, graph breaks and recompilations since the last `reset_compile_stats`, from dynamo."""
    counters = torch._dynamo.utils.counters
    recompiles = [
        reason
        for reason in (
            getattr(m, "recompile_reason", None) for m in torch._dynamo.utils.get_compilation_metrics()
        )
        if reason
    ]
    breaks = Counter({str(reason).strip(): count for reason, count in counters["graph_break"].items()})
    return CompileStats(
        graph_count=int(counters["stats"]["unique_graphs"]),
        graph_break_count=int(sum(counters["graph_break"].values())),
        recompile_count=len(recompiles),
        cudagraph_skips=int(counters["inductor"]["cudagraph_skips"]),
        graph_break_reasons=_counted(breaks),
        recompile_reasons=_counted(
            Counter(_COMPILE_ID.sub("", str(reason)).strip() for reason in recompiles)
        ),
        cache={column: int(counters[group][name]) for column, (group, name) in CACHE_COUNTERS.items()},
    )


def inductor_cache_dir() -> Path:
    """The directory inductor caches in (TORCHINDUCTOR_CACHE_DIR, else its default), created. Where the
    variable is set (every cell of a sweep), inductor is not imported for it: an eager cell never
    imports it otherwise, and the import took 1-3 s of a tiny eager cell's 5-8 s."""
    named = os.environ.get(INDUCTOR_ENV)
    if named:
        path = Path(named).absolute()
        path.mkdir(parents=True, exist_ok=True)
        return path
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir())


def cache_state() -> dict[str, Any]:
    """The run columns `compile_cache_dir` (the inductor cache this process compiles with) and
    `compile_cache_warm` (whether it held FX graph or AOTAutograd entries before the cell began)."""
    inductor = inductor_cache_dir()
    return {"compile_cache_dir": str(inductor), "compile_cache_warm": has_cache_entries(inductor)}


def has_cache_entries(inductor_dir: Path) -> bool:
    """Whether an inductor cache directory holds FX graph or AOTAutograd cache entries."""
    for name in ("fxgraph", "aotautograd"):
        try:
            with os.scandir(inductor_dir / name) as entries:
                if next(entries, None) is not None:
                    return True
        except OSError:  # not there (yet)
            continue
    return False


@contextlib.contextmanager
def count_ddp_splits() -> Iterator[list[int]]:
    """Inside the block, the bucket count of every graph that dynamo's DDPOptimizer compiles is
    appended to the yielded list; a graph of n buckets was cut into n pieces (n - 1 splits).

    Dynamo has no counter for these splits (they are not graph breaks); DDPOptimizer keeps the
    buckets of the graph it last compiled in `.buckets` ("for testing/debugging purposes", its source
    says), which a wrapper around its `compile_fn` reads after each graph.
    """
    from torch._dynamo.backends.distributed import DDPOptimizer

    counts: list[int] = []
    original = DDPOptimizer.compile_fn

    def compile_fn(self: DDPOptimizer, gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        compiled = original(self, gm, example_inputs, **kwargs)
        counts.append(len(self.buckets))
        return compiled

    DDPOptimizer.compile_fn = compile_fn
    try:
        yield counts
    finally:
        DDPOptimizer.compile_fn = original


class NoDdpSplits(Instrument):
    """A cell of one process: no DDP, no split to count."""

    splits = 0


class DdpSplits(Instrument):
    """The graph splits of DDPOptimizer (`count_ddp_splits`) while a cell of several ranks trains."""

    def __init__(self) -> None:
        self._counting = contextlib.ExitStack()
        self._buckets: list[int] = []

    @classmethod
    def for_ranks(cls, world_size: int) -> DdpSplits | NoDdpSplits:
        return cls() if world_size > 1 else NoDdpSplits()

    @property
    def splits(self) -> int:
        return sum(buckets - 1 for buckets in self._buckets)

    def before_loop(self, cell: PreparedCell) -> None:
        self._buckets = self._counting.enter_context(count_ddp_splits())

    def after_loop(self) -> dict[str, Any]:
        self._counting.close()
        return {}


class CompileCounters(Instrument):
    """What compiled, from dynamo's records since the cell was built (workloads/train_cell.py resets
    them before the backend is applied), with `ddp_splits`' count; for torchscript, whether it
    traced. Nothing for eager without a compiled optimizer."""

    def __init__(self, *, backend: BackendConfig, ddp_splits: DdpSplits | NoDdpSplits):
        self.backend, self.ddp_splits = backend, ddp_splits
        self._compiled: Any = None

    def before_loop(self, cell: PreparedCell) -> None:
        self._compiled = cell.compiled

    def after_summary(self, rec: CellRecorder) -> dict[str, Any]:
        if self._compiled.uses_dynamo or self.backend.compile_optimizer:
            return {**compile_stats().columns(), "ddp_graph_splits": self.ddp_splits.splits}
        if self.backend.name == "torchscript":
            traced = isinstance(self._compiled.module, torch.jit.ScriptModule)
            return {"graph_count": int(traced), "graph_break_count": 0, "recompile_count": 0}
        return {}
