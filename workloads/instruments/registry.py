"""The instruments of a training cell, in one list that is itself an instrument: `instruments_for`.

Their order is the order of every moment (workloads/instruments/base.py), and it matters where two
share one: before measuring, the waits for quiet (other replicates, then the cell's own compile
workers) come before the host's load opens its window, and the GPU's energy opens its measured
window last, so that neither the waits' seconds nor the host's probe of launches on the device are
in it; after the loop, the host's load and the energy close their windows before provenance probes
the GPU (nvidia-smi is no part of them; provenance's first probe, an NVML call of milliseconds,
falls in the energy's warm-up window); DDP's splits are counted before the compile counters report
them. Once the loop finished, the profiled window comes
first (its steps train the cell on) and the accuracy check last: its steps change no state that
another instrument reads. A new measurement is one `Instrument` subclass, added here.
"""

from __future__ import annotations

import sys

from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks
from workloads.instruments.accuracy import AccuracyCheck
from workloads.instruments.base import Instrument, Instruments
from workloads.instruments.cold_compile import ColdCompile
from workloads.instruments.compile_workers import CompileWorkersIdle
from workloads.instruments.dynamo_records import CompileCounters, DdpSplits
from workloads.instruments.gpu_energy import GpuEnergy
from workloads.instruments.host_load import HostLoad
from workloads.instruments.profiled_window import GpuBusy
from workloads.instruments.provenance import Provenance
from workloads.local import turns


class WaitForQuiet(Instrument):
    """Before measuring, wait until no other replicate of the local executor imports or exits
    (workloads/local/turns.py); say so in the log when that took a while."""

    @classmethod
    def for_process(cls) -> Instrument:
        """This instrument in a process of the local executor, which takes turns; else a no-op."""
        return cls() if turns.taking_turns() else Instrument()

    def before_measuring(self) -> None:
        if (waited := turns.wait_for_quiet()) >= 0.1:
            print(
                f"compilebench: waited {waited:.1f} s before measuring while other replicates imported "
                "or exited",
                file=sys.stderr,
                flush=True,
            )


def instruments_for(cfg: CellConfig, ranks: Ranks, repeat: int = 0) -> Instruments:
    """The instruments of one attempt of replicate `repeat` of `cfg` on this rank, each built for it (a
    no-op where it does not apply)."""
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
            AccuracyCheck.for_cell(cfg, ranks.world_size, repeat),
        ]
    )
