"""How a GEMM cell with `gemm.timing=burst` times its GEMM: short bursts of the CUDA-graph replays
of workloads/gemm/timing.py, each after an idle pause, as `triton.testing.do_bench` and profiler
timings time a kernel; beside `sustained`, the measured loop's seconds of replays back to back
(docs/gemm.md "Timing modes"). The two differ where the GPU's clocks do: a GEMM that draws the board to
its power cap runs at lower clocks after a second of it than in a burst.

Warm-up as the measured loop's: `warmup_steps` replays (the first captures the graph), one step row
each, `before_measuring` before the last. Then `steps` bursts, each:

    the device synchronised, then idle for BURST_PAUSE_S;
    BURST_LEAD_REPLAYS replays, untimed: the GPU runs them while the host queues the timed ones;
    BURST_REPLAYS replays between two marks of the step timer (CUDA events; the host clock on the CPU),
    the GPU's clocks sampled halfway through (`during_burst`);

and one measured step row per burst: its time per replay (`per_gemm` makes it per GEMM), so the cell's
median step is the median over its bursts. `measure.*` does not apply: a burst cell runs `steps` bursts.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from workloads.cell.step_timer import step_timer
from workloads.cell.train import StepRecord, synchronize
from workloads.gemm.timing import GemmSteps

#: The idle pause before each burst, s: long against the longest burst (BURST_REPLAYS x 100 GEMMs at
#: M = 4096 fp8, ~405 µs each on an H100: 81 ms), so the board's power over a burst and its pause stays
#: near half its sustained draw or less and its clocks start each burst where a GPU fresh from idle
#: does; short enough that the default 20 bursts take ~4 s, a sustained cell's time. Whether it
#: suffices is what examples/benchmarks/gemm_timing_modes.py checks against a direct timing.
BURST_PAUSE_S = 0.2
#: Replays before the timed ones, untimed: without one the first timed replay would wait on an idle
#: GPU for the host's launch of it.
BURST_LEAD_REPLAYS = 1
#: Replays timed per burst: 200 GEMMs, the direct CUDA-graph timing issue 40 compared with (its "200
#: GEMMs a timing"): 5 ms at the post's M = 16 in fp8 on an H100, 81 ms at M = 4096.
BURST_REPLAYS = 2
#: run.parquet `stop_reason` of a burst cell: it ran its `steps` bursts.
BURST_STOP_REASON = "steps"


def run_bursts(
    steps: GemmSteps,
    warmup_steps: int,
    bursts: int,
    device: torch.device,
    on_step: Callable[[StepRecord], None],
    before_measuring: Callable[[], object],
    during_burst: Callable[[], object],
) -> str:
    """Warm up, then time `bursts` bursts (module docstring), reporting each step row through `on_step`
    as it is read. Returns the stop reason (BURST_STOP_REASON)."""
    timer = step_timer(device)
    timer.settle()
    if warmup_steps == 0:
        before_measuring()
    for i in range(warmup_steps):
        if i == warmup_steps - 1:
            before_measuring()
        (times,) = timer.block(steps, 1)
        on_step(StepRecord(i, "warmup", times.step_ms, times.data_ms, times.loss, host_time_ms=times.host_ms))
    for burst in range(bursts):
        synchronize(device)
        time.sleep(BURST_PAUSE_S)
        for _ in range(BURST_LEAD_REPLAYS):
            steps()
        timer.begin(BURST_REPLAYS)
        timed = [timer.queue(steps) for _ in range(BURST_REPLAYS)]
        if device.type == "cuda":  # halfway: the clocks the burst runs at, not those of its start
            timed[BURST_REPLAYS // 2 - 1].end.synchronize()
        during_burst()
        replays = timer.read_block(timed)
        on_step(
            StepRecord(
                warmup_steps + burst,
                "measure",
                sum(one.step_ms for one in replays) / BURST_REPLAYS,
                0.0,
                replays[-1].loss,
                host_time_ms=statistics.fmean(one.host_ms for one in replays),
            )
        )
    return BURST_STOP_REASON
