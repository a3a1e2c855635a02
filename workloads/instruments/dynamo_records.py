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
    torch._inductor.runtime.cache_dir_utils.cache_dir()   the inductor cache directory in use (created)
    <inductor cache>/fxgraph/, <inductor cache>/aotautograd/   where those two caches keep entries

A torch that renames one of them fails tests/test_compile_reasons.py (a real model that breaks and
recompiles) or tests/test_compile_cache.py (a real cold and warm compile), not a sweep. In a
distributed cell these are rank 0's records.

Reasons are recorded as dynamo words them, stripped; a recompile's without its compile id
(`0/1: `), which differs between recompiles for one reason. Identical reasons are counted once
each with how often they occurred: run.parquet's `graph_break_reasons` and `recompile_reasons`.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

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
    """The directory inductor caches in (TORCHINDUCTOR_CACHE_DIR, else its default), created."""
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
