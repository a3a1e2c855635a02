"""What dynamo recorded about a cell's compilation: graphs, graph breaks, recompiles, and why.

Every private dynamo API that workloads read is used here and nowhere else (dynamo has no public
API for these records; torch 2.11 on the H100 and 2.15 on the CPU machines have them as below):

    torch._dynamo.utils.counters              "stats"/"unique_graphs" (graphs compiled),
                                              "graph_break" (dynamo's message -> times it broke there),
                                              "inductor"/"cudagraph_skips"
    torch._dynamo.utils.get_compilation_metrics()   one record per frame compile; `recompile_reason`
                                              (the guard that failed) is set on a recompile
    torch._dynamo.utils.clear_compilation_metrics(), torch._dynamo.reset()

A torch that renames one of them fails tests/test_compile_reasons.py (a real model that breaks and
recompiles), not a sweep. In a distributed cell these are rank 0's records.

Reasons are recorded as dynamo words them, stripped; a recompile's without its compile id
(`0/1: `), which differs between recompiles for one reason. Identical reasons are counted once
each with how often they occurred: run.parquet's `graph_break_reasons` and `recompile_reasons`.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch

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
    recompiles = [reason for reason in (getattr(m, "recompile_reason", None)
                                        for m in torch._dynamo.utils.get_compilation_metrics()) if reason]
    breaks = Counter({str(reason).strip(): count for reason, count in counters["graph_break"].items()})
    return CompileStats(
        graph_count=int(counters["stats"]["unique_graphs"]),
        graph_break_count=int(sum(counters["graph_break"].values())),
        recompile_count=len(recompiles),
        cudagraph_skips=int(counters["inductor"]["cudagraph_skips"]),
        graph_break_reasons=_counted(breaks),
        recompile_reasons=_counted(Counter(_COMPILE_ID.sub("", str(reason)).strip() for reason in recompiles)),
    )
