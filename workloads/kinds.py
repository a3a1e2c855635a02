"""The kinds of cell, one row each of `KINDS`: which configs a kind runs, what its attempt builds and
steps (its `MeasuredCell`) and the instruments that observe it, side by side.

workloads/run.py's one attempt runs whichever kind a config is (`kind_of`): a training cell
(workloads/train_cell.py), a GEMM (workloads/gemm/cell.py, model=gemm) or a layer's GEMMs
(workloads/gemm/layer_cell.py, model=gemm with gemm.layer). A new kind is a MeasuredCell, its
instruments and a row here (docs/architecture.md "Adding a cell kind").

A kind's instruments are one `Instruments`, whose order is the order of every moment
(workloads/instruments/base.py), and it matters where two share one: before measuring, the waits
for quiet (other replicates, then the cell's own compile workers) come before the host's load opens
its window, and the GPU's energy opens its measured window last, so that neither the waits' seconds
nor the host's probe of launches on the device are in it; after the loop, the host's load and the
energy close their windows before provenance probes the GPU (nvidia-smi is no part of them;
provenance's first probe, an NVML call of milliseconds, falls in the energy's warm-up window); DDP's
splits are counted before the compile counters report them. Once the loop finished, the profiled
window comes first (its steps train the cell on) and the accuracy check last: its steps change no
state that another instrument reads. A GEMM cell's follow the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from workloads.cell.catalog import GEMM_FAMILY
from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks
from workloads.cell.recorder import CellRecorder, RankReport
from workloads.contract.vocabulary import SUSTAINED
from workloads.gemm.cell import GemmCell
from workloads.gemm.layer_cell import LayerCell, LayerWindows
from workloads.gemm.timing import GEMMS_PER_REPLAY
from workloads.instruments.accuracy import AccuracyCheck
from workloads.instruments.base import Instrument, Instruments
from workloads.instruments.cold_compile import ColdCompile
from workloads.instruments.compile_workers import CompileWorkersIdle
from workloads.instruments.dynamo_records import CompileCounters, DdpSplits
from workloads.instruments.gpu_energy import GpuEnergy
from workloads.instruments.host_load import HostLoad, WaitForQuiet
from workloads.instruments.profiled_window import GpuBusy
from workloads.instruments.provenance import Provenance
from workloads.train_cell import TrainingCell


class MeasuredCell(Protocol):
    """What an attempt builds and steps, made from (cfg, rec, ranks): a kind's `cell`."""

    cfg: CellConfig

    def build(self) -> object:
        """Build the cell (the run row learns what it is); what the instruments' `before_loop` gets."""

    def measure(self, instruments: Instrument) -> None:
        """Warm up and measure, calling the instruments' moments inside the loop (`before_measuring`,
        `after_block`); the loop's columns in the run row."""

    def peak_memory(self) -> int | None:
        """This rank's peak memory (bytes), at the loop's end."""

    def summarise(self, reports: list[RankReport]) -> None:
        """Summarise the ranks' steps into the run row (its columns from the summary with it)."""


def training_instruments(cell: TrainingCell) -> Instruments:
    """A training cell's instruments on this rank, each built for its replicate (a no-op where it
    does not apply)."""
    cfg, ranks = cell.cfg, cell.ranks
    ddp_splits = DdpSplits.for_ranks(ranks.world_size)
    return Instruments(
        [
            ColdCompile.for_cell(cfg),
            WaitForQuiet.for_process(),
            CompileWorkersIdle(),
            HostLoad(),
            GpuEnergy.for_cell(cfg, ranks),
            Provenance(),
            ddp_splits,
            CompileCounters(backend=cfg.backend, ddp_splits=ddp_splits),
            GpuBusy.for_cell(cfg, ranks.world_size),
            AccuracyCheck.for_cell(cfg, ranks.world_size, cell.rec.run.get("repeat", 0)),
        ]
    )


def gemm_instruments(cell: GemmCell) -> Instruments:
    """A GEMM cell's: the waits for quiet, the GPU's energy (a step row is one GEMM of a replay of
    GEMMS_PER_REPLAY; sustained only: a burst cell's window is mostly its idle pauses), its clocks
    (the cell's own, sampled by its loop), provenance. They read no more of the built cell than its
    device (GemmSteps has one)."""
    sustained = cell.cfg.gemm.timing == SUSTAINED
    energy = GpuEnergy.for_cell(cell.cfg, cell.ranks, steps_per_row=GEMMS_PER_REPLAY) if sustained else None
    return Instruments(filter(None, [WaitForQuiet.for_process(), energy, cell.clocks, Provenance()]))


def layer_instruments(cell: LayerCell) -> Instruments:
    """A layer cell's: a GEMM cell's, then both ways of one layer on the warm cell (LayerWindows)."""
    return Instruments([*gemm_instruments(cell).members, LayerWindows(cell)])


@dataclass(frozen=True)
class CellKind:
    """One kind of cell: which configs it runs, its MeasuredCell and its instruments."""

    name: str
    runs: Callable[[CellConfig], bool]
    cell: Callable[[CellConfig, CellRecorder, Ranks], MeasuredCell]
    instruments: Callable[..., Instruments]
    """Made from the cell (a GEMM cell's clocks are its loop's)."""


def _gemm(cfg: CellConfig) -> bool:
    return cfg.model.name == GEMM_FAMILY and cfg.gemm.layer is None


def _layer(cfg: CellConfig) -> bool:
    return cfg.model.name == GEMM_FAMILY and cfg.gemm.layer is not None


KINDS = (
    CellKind("training", lambda cfg: cfg.model.name != GEMM_FAMILY, TrainingCell, training_instruments),
    CellKind("gemm", _gemm, GemmCell, gemm_instruments),
    CellKind("gemm layer", _layer, LayerCell, layer_instruments),
)


def kind_of(cfg: CellConfig) -> CellKind:
    """The one kind that runs `cfg`."""
    (kind,) = (kind for kind in KINDS if kind.runs(cfg))
    return kind
