"""What a cell records: every rank's own steps, merged on rank 0 into the cell's Parquet rows.

Each rank times its steps on its own device clock (`StepRecord`s). A cell of one process is the
one-rank case of the same merge, so its rows are what a single process measures. With several
ranks (DDP), rank 0 gathers every rank's `RankReport` after the measured loop and writes one
steps.parquet row per step:

    step_time_ms   the slowest rank's: DDP's gradient all-reduce makes every rank wait for the
                   slowest, so a global step has ended only when that rank's has
    data_time_ms   the longest wait for batches of any rank
    host_time_ms   the longest host time to issue the step of any rank (its call to its return)
    loss           the mean over ranks: each rank trains on its own samples, and the mean is the
                   loss of the global batch
    items, tflops, mfu   of the global batch: all ranks' items and FLOPs, over all ranks' peaks
    rank_step_time_ms, rank_data_time_ms   each rank's own values, in rank order

The run row's summary (median step, throughput, MFU, compile time) is computed from the merged
steps of the cell's own side (a paired cell's eager baseline steps are rows, not its steps), and
so is the end-to-end one over the measured span: `measured_s` is the sum of the merged measured
steps' times, `e2e_items_per_s` and `e2e_mfu` are all measured items and FLOPs over it,
`data_wait_s` is the sum of the merged steps' waits for batches, `host_ms_per_step` (and a paired
cell's `eager_host_ms_per_step`, of its eager side's) the median host time of its measured steps.
`rank_*` columns keep each rank's median step, compile time, peak memory, host and GPU energy; the
energies a rank reads of its own GPU (SUMMED_OVER_RANKS) travel in its report, and the cell's are
their sums over the ranks. When a distributed cell fails, rank 0 does not gather (a collective would
wait forever for a rank that died): its rows are then rank 0's own steps, and the sums null.
"""

from __future__ import annotations

import socket
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.cell.train import StepRecord
from workloads.contract.schema import RUN_SCHEMA, SCHEMA_VERSION, STEPS_SCHEMA, append_rows_atomic
from workloads.contract.sweep_dir import RUN_FILE, STEPS_FILE
from workloads.contract.vocabulary import EAGER_SIDE

#: Run columns each rank reads of its own GPU (workloads/instruments/gpu_energy.py): the cell's value
#: is their sum over the ranks, null unless every rank's report has one.
SUMMED_OVER_RANKS = ("energy_j", "warmup_energy_j", "idle_power_w")


@dataclass
class RankReport:
    """What one rank contributes to the cell's record (sent to rank 0 by pickling)."""

    rank: int
    hostname: str
    steps: list[StepRecord]
    peak_mem_bytes: int | None
    own: dict[str, float | None] = field(default_factory=dict)
    """This rank's values of SUMMED_OVER_RANKS."""


@dataclass
class MergedStep(StepRecord):
    """One step of the cell over all ranks (module doc): merged values, and each rank's own."""

    rank_step_time_ms: list[float] = field(default_factory=list)
    rank_data_time_ms: list[float] = field(default_factory=list)


def merge_steps(reports: Sequence[RankReport]) -> list[MergedStep]:
    """The steps every rank finished, each merged over the ranks (reports in any order)."""
    ordered = sorted(reports, key=lambda report: report.rank)
    merged = []
    for per_rank in zip(*(report.steps for report in ordered)):  # a rank that stopped early ends it
        step, phase = per_rank[0].step, per_rank[0].phase
        if any((s.step, s.phase) != (step, phase) for s in per_rank):
            raise ValueError(f"ranks disagree on step {step}: {[(s.step, s.phase) for s in per_rank]}")
        times = [s.step_time_ms for s in per_rank]
        waits = [s.data_time_ms for s in per_rank]
        hosts = [s.host_time_ms for s in per_rank if s.host_time_ms is not None]
        merged.append(
            MergedStep(
                step=step,
                phase=phase,
                step_time_ms=max(times),
                data_time_ms=max(waits),
                loss=statistics.fmean(s.loss for s in per_rank),
                rank_step_time_ms=times,
                rank_data_time_ms=waits,
                side=per_rank[0].side,
                pair=per_rank[0].pair,
                host_time_ms=max(hosts) if len(hosts) == len(per_rank) else None,
            )
        )
    return merged


def compile_time_s(
    warmup_ms: Sequence[float], measured_ms: Sequence[float], setup_time_s: float
) -> float | None:
    """Setup (ahead-of-time work such as TorchScript tracing) plus the warm-up steps' excess over
    the median measured step: compilation, autotuning, graph recording. None without measured steps."""
    if not measured_ms:
        return None
    median = statistics.median(measured_ms)
    return setup_time_s + sum(max(0.0, t - median) for t in warmup_ms) / 1e3


def _phase_times(steps: Sequence[StepRecord], phase: str) -> list[float]:
    """The cell's own step times of `phase`: a paired cell's eager side is its baseline, not its steps."""
    return [s.step_time_ms for s in steps if s.phase == phase and s.side != EAGER_SIDE]


def _host_times(merged: Sequence[MergedStep]) -> dict[str, float | None]:
    """The median host time of the measured steps of each side: the cell's own, and a paired cell's
    eager side's (None for a side without any)."""
    columns: dict[str, float | None] = {}
    for prefix, own in (("", True), ("eager_", False)):
        times = [
            step.host_time_ms
            for step in merged
            if step.phase == "measure" and (step.side != EAGER_SIDE) == own and step.host_time_ms is not None
        ]
        columns[f"{prefix}host_ms_per_step"] = statistics.median(times) if times else None
    return columns


class CellRecorder:
    """Collects this rank's step records and the run row of one attempt; `summarise` merges the
    ranks' reports into the step rows and the summary columns."""

    def __init__(self, cell_id: str, attempt: int, world_size: int = 1):
        self.cell_id, self.attempt, self.world_size = cell_id, attempt, world_size
        self.records: list[StepRecord] = []
        self.steps: list[dict[str, Any]] = []
        self.run: dict[str, Any] = {
            "cell_id": cell_id,
            "attempt": attempt,
            "world_size": world_size,
            "schema_version": SCHEMA_VERSION,
        }
        self.items_per_step: int | None = None
        """Items (tokens, images) of one optimizer step over all ranks."""
        self.flops_per_step: float | None = None
        """Training FLOPs of one optimizer step over all ranks."""
        self.peak: float | None = None
        """Peak TFLOP/s of one device; MFU divides by world_size of them."""

    def on_step(self, rec: StepRecord) -> None:
        self.records.append(rec)

    def report(self, rank: int, peak_mem_bytes: int | None) -> RankReport:
        """This rank's contribution, to be gathered by rank 0."""
        own = {name: self.run.get(name) for name in SUMMED_OVER_RANKS}
        return RankReport(rank, socket.gethostname(), list(self.records), peak_mem_bytes, own)

    def summarise(self, reports: Sequence[RankReport], compiles: bool, setup_time_s: float) -> None:
        """Step rows and summary columns from the ranks' reports. A backend that compiles gets a
        compile time (see `compile_time_s`), the cell's from the merged steps and one per rank;
        eager has none (its warm-up excess is in first_step_ms)."""
        reports = sorted(reports, key=lambda report: report.rank)
        merged = merge_steps(reports)
        self.steps = [self._row(step) for step in merged]
        per_rank = [(_phase_times(r.steps, "warmup"), _phase_times(r.steps, "measure")) for r in reports]
        memory = [r.peak_mem_bytes for r in reports]
        self.run.update(
            rank_hostname=[r.hostname for r in reports],
            rank_peak_mem_bytes=memory,
            peak_mem_bytes=max((m for m in memory if m is not None), default=None),
            rank_median_step_ms=[
                statistics.median(measured) if measured else None for _, measured in per_rank
            ],
            rank_compile_time_s=[compile_time_s(*times, setup_time_s) for times in per_rank]
            if compiles
            else None,
        )
        for name in SUMMED_OVER_RANKS:
            values = [r.own.get(name) for r in reports]
            every_rank = len(values) == self.world_size and None not in values
            self.run[name] = sum(values) if every_rank else None
        energies = [r.own.get("energy_j") for r in reports]
        self.run["rank_energy_j"] = energies if any(e is not None for e in energies) else None
        measured = _phase_times(merged, "measure")
        if not measured:
            return
        median = statistics.median(measured)
        self.run.update(
            measured_steps=len(measured),
            median_step_ms=median,
            mean_step_ms=statistics.fmean(measured),
            std_step_ms=statistics.stdev(measured) if len(measured) > 1 else 0.0,
            items_per_s=self.items_per_step / (median / 1e3),
            mfu=self._mfu(median),
            first_step_ms=merged[0].step_time_ms,
            compile_time_s=compile_time_s(_phase_times(merged, "warmup"), measured, setup_time_s)
            if compiles
            else None,
            **self._end_to_end(merged),
            **_host_times(merged),
        )

    def _end_to_end(self, merged: Sequence[MergedStep]) -> dict[str, Any]:
        """Throughput and MFU over the whole measured span. The steps' boundaries follow one
        another (workloads/cell/train.py), so the span is the sum of the measured steps' times — of the
        slowest rank's per step in a distributed cell — and the device's idle time waiting for data
        or for the host is in it."""
        steps = [step for step in merged if step.phase == "measure" and step.side != EAGER_SIDE]
        measured_s = sum(step.step_time_ms for step in steps) / 1e3
        mean_step_ms = measured_s * 1e3 / len(steps)
        return {
            "measured_s": measured_s,
            "e2e_items_per_s": self.items_per_step * len(steps) / measured_s if measured_s > 0 else None,
            "e2e_mfu": self._mfu(mean_step_ms),  # all measured FLOPs over measured_s
            "data_wait_s": sum(step.data_time_ms for step in steps) / 1e3,
        }

    def _mfu(self, step_time_ms: float) -> float | None:
        if not (self.flops_per_step and self.peak and step_time_ms > 0):
            return None
        return self.flops_per_step / (step_time_ms / 1e3) / 1e12 / (self.peak * self.world_size)

    def _row(self, step: MergedStep) -> dict[str, Any]:
        seconds = step.step_time_ms / 1e3
        return {
            "cell_id": self.cell_id,
            "attempt": self.attempt,
            "step": step.step,
            "phase": step.phase,
            "step_time_ms": step.step_time_ms,
            "data_time_ms": step.data_time_ms,
            "loss": step.loss,
            "items": self.items_per_step,
            "tflops": self.flops_per_step / seconds / 1e12 if self.flops_per_step and seconds > 0 else None,
            "mfu": self._mfu(step.step_time_ms),
            "rank_step_time_ms": step.rank_step_time_ms,
            "rank_data_time_ms": step.rank_data_time_ms,
            "side": step.side,
            "pair": step.pair,
            "host_time_ms": step.host_time_ms,
        }

    def write(self, cell_dir: Path) -> None:
        append_rows_atomic(cell_dir / STEPS_FILE, self.steps, STEPS_SCHEMA)
        append_rows_atomic(cell_dir / RUN_FILE, [self.run], RUN_SCHEMA)
