"""The cold compile of `compile.measure=cold_warm`: each attempt of a dynamo-compiled cell compiles
first with nothing cached, in a process of its own, then again in its own process from what that
one left, and measures (docs/measurement.md, "Cold and warm compiles").

A compile's cost depends on what torch.compile's disk caches hold (inductor's FX graph and
AOTAutograd caches, triton's kernels), so the attempt makes a fresh, empty cache directory
(`private_caches`) and starts `python -m workloads.run CONFIG --compile-cold RESULT` in it
(`ColdCompile.before_build`, the cell's instrument): that process builds the cell, runs its
warm-up steps and one more step, which fills the caches, and writes its warm-up steps' times into
RESULT (`compile_cold_here`). The attempt then builds and compiles the cell itself, warm from those
caches, and measures as always; both compiles are set against its median measured step
(`ColdCompile.after_summary`).

The cold compile has a process of its own because a process keeps more of what it compiled than
the disk caches do (dynamo's cache entries on the model's code, inductor's loaded modules and
kernels, the counters): a second compile in the same process would be warmer than a new process
with the same caches, which is what every other cell, replicate and Slurm job is. The measured
process stays such a new process, and shares nothing with the cold one but the disk caches.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workloads.cell.catalog import NON_DYNAMO_BACKENDS
from workloads.cell.cell_id import config_digest
from workloads.cell.config import CellConfig
from workloads.cell.config_io import cell_config_to_dict
from workloads.cell.recorder import CellRecorder, compile_time_s
from workloads.cell.train import PreparedCell, run_steps
from workloads.contract.sweep_dir import config_yaml
from workloads.instruments import compile_cache, dynamo_records
from workloads.instruments.base import Instrument
from workloads.local import turns
from workloads.local.child_env import child_env


def measures_cold_and_warm(cfg: CellConfig) -> bool:
    """`compile.measure=cold_warm` on a backend that compiles through dynamo (else a no-op)."""
    return cfg.compile.measure == "cold_warm" and cfg.backend.name not in NON_DYNAMO_BACKENDS


def private_caches(cfg: CellConfig) -> contextlib.AbstractContextManager[Path | None]:
    """Around the attempt: under cold_warm both compiles use a fresh cache directory of the
    attempt's own (compile_cache.private_base), not the sweep's; else nothing changes."""
    return compile_cache.private_base() if measures_cold_and_warm(cfg) else contextlib.nullcontext()


class ColdCompile(Instrument):
    """The cold compile of a cell that measures cold and warm (`for_cell`): before the build, in a
    process of its own; after the summary, `compile_cold_s` and `compile_warm_s`."""

    def __init__(self, cfg: CellConfig):
        self.cfg = cfg
        self.cold_warmup_ms: list[float] = []
        self.setup_time_s = 0.0

    @classmethod
    def for_cell(cls, cfg: CellConfig) -> Instrument:
        """This instrument where the cell measures cold and warm, else one that does nothing."""
        return cls(cfg) if measures_cold_and_warm(cfg) else Instrument()

    def before_build(self) -> None:
        """The cell's build and warm-up steps (and one more step) in a process of its own, with the
        caches of COMPILEBENCH_COMPILE_CACHE (a fresh base: empty), which it leaves filled; keeps its
        warm-up steps' times (ms). Its output goes to this process's log; a failure raises."""
        base = Path(os.environ[compile_cache.BASE_ENV])
        config, result = base / "cold.yaml", base / "cold.json"
        config.write_text(config_yaml(cell_config_to_dict(self.cfg)))
        print(
            "compilebench: compiling cold in a process of its own (compile.measure=cold_warm)",
            file=sys.stderr,
            flush=True,
        )
        sys.stdout.flush()
        code = subprocess.run(
            [sys.executable, "-m", "workloads.run", str(config), "--compile-cold", str(result)],
            # not one of the local executor's replicates: it takes no turn on the device
            env=child_env(drop=(turns.DIR_ENV, turns.INDEX_ENV)),
            stdin=subprocess.DEVNULL,
        ).returncode
        if code != 0:
            raise RuntimeError(
                f"the cold compile's process (compile.measure=cold_warm) exited {code}; its output is "
                "in this log, before this line"
            )
        self.cold_warmup_ms = json.loads(result.read_text())["warmup_ms"]

    def before_loop(self, cell: PreparedCell) -> None:
        self.setup_time_s = cell.compiled.setup_time_s

    def after_summary(self, rec: CellRecorder) -> dict[str, Any]:
        """`compile_cold_s` and `compile_warm_s` (the warm compile's `compile_time_s`): the same
        measure as compile_time_s, against this attempt's measured steps."""
        measured = [row["step_time_ms"] for row in rec.steps if row["phase"] == "measure"]
        return {
            "compile_cold_s": compile_time_s(self.cold_warmup_ms, measured, self.setup_time_s),
            "compile_warm_s": rec.run.get("compile_time_s"),
        }


def compile_cold_here(
    cfg: CellConfig, result: Path, prepare: Callable[[CellConfig, CellRecorder], PreparedCell]
) -> None:
    """What `--compile-cold RESULT` runs: build, compile (`prepare`: workloads.train_cell.prepare_cell)
    and run the warm-up steps and one more, then write the warm-up steps' times (ms) into RESULT
    (JSON)."""
    rec = CellRecorder(cfg.cell_id or config_digest(cfg), 0, 1)
    cell = prepare(cfg, rec)
    warmup: list[float] = []
    run_steps(
        cell.step,
        cfg.warmup_steps,
        1,
        cell.device,
        lambda record: warmup.append(record.step_time_ms) if record.phase == "warmup" else None,
    )
    stats = dynamo_records.compile_stats()
    print(
        f"compilebench: cold compile done: warm-up steps {[round(t) for t in warmup]} ms, "
        f"caches {stats.cache}",
        file=sys.stderr,
        flush=True,
    )
    result.write_text(json.dumps({"warmup_ms": warmup, "cache": stats.cache}))
