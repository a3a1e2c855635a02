"""Run one cell: `python -m workloads.run CONFIG.yaml [--cell-dir DIR]`, or `run_cell(cfg, dir)`.

The one lifecycle of an attempt, for every cell: `run_cell` opens the run row, joins the cell's
process group, turns signals and failures into a status and writes `steps.parquet` and
`run.parquet` into the cell directory; `attempt` builds the cell, runs its warm-up and measured
steps and summarises them, with its instruments at their moments. What it builds and steps, and
its instruments, are the one parameter, the config's kind (workloads/kinds.py `KINDS`): a training
cell, a GEMM (model=gemm) or a layer's GEMMs. A distributed cell runs this in each of its
processes (workloads/cell/distributed.py): every rank trains and measures, and rank 0 gathers the ranks'
steps and alone writes the files (workloads/cell/recorder.py).
Whatever happens after the config is read — an exception, CUDA OOM, a compile error, SIGTERM
(`cancelled`), SIGUSR2 ahead of the time limit (`timeout`), a device that cannot run the cell
(`not_supported`: fp8 without fp8 tensor cores), or a backend that compiled nothing —
a run row with the status and error text is written, and the process exits non-zero unless the
status is `completed` (so Slurm marks the job failed).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

#: Signals that reach `python -m workloads.run` while it still imports torch (seconds): remembered
#: here and raised by run_cell once it can record them, so that a scancel (TERM) or the time
#: limit's warning (USR2) that comes early still becomes the cell's status instead of killing it.
_EARLY_SIGNALS: list[int] = []
#: When this process started (before torch's import), for a process started ahead (take_turn).
_PROCESS_STARTED = datetime.now(timezone.utc)
#: Device memory a finished process may still hold (its CUDA context aside) and let the next
#: replicate start beside it (`hand_over`): a little, never what a large cell's build may need.
HAND_OVER_MAX_RESERVED = 256 << 20
if __name__ == "__main__":
    for _signum in (signal.SIGTERM, signal.SIGUSR2):
        signal.signal(_signum, lambda signum, frame: _EARLY_SIGNALS.append(signum))

import torch  # noqa: E402  (after the early handlers: this import takes seconds)

from workloads.cell import distributed
from workloads.cell.backends import compiled_status
from workloads.cell.catalog import FAMILY_LIBRARIES, check_cell
from workloads.cell.cell_id import config_digest
from workloads.cell.config import CellConfig, ConfigError
from workloads.cell.config_io import cell_config_to_dict, load_cell_config
from workloads.cell.distributed import LaunchError, Ranks
from workloads.cell.recorder import CellRecorder
from workloads.cell.support import NotSupported
from workloads.contract.attempts import next_attempt
from workloads.contract.vocabulary import (
    CANCELLED,
    COMPLETED,
    FAILED,
    NOT_SUPPORTED,
    OOM,
    TIMEOUT,
    axes_from_config,
)
from workloads.instruments import cold_compile
from workloads.instruments.base import Instrument
from workloads.instruments.compile_workers import start_compile_workers, wait_until_idle
from workloads.instruments.environment import resolve_device, where_it_runs
from workloads.kinds import MeasuredCell, kind_of
from workloads.local import turns
from workloads.train_cell import prepare_cell


class CellInterrupted(BaseException):
    """Raised in the cell's process when Slurm (scancel, time limit) sends SIGTERM. Not an `Exception`,
    as KeyboardInterrupt is not: torch 2.15 catches every `Exception` while inductor computes its cache
    keys and probes the CPU, and a signal raised there was swallowed and the cell trained on."""


class CellTimedOut(CellInterrupted):
    """Raised in the cell's process on SIGUSR2: the job's time limit is near (submitit asks Slurm
    for USR2 shortly before it, `--signal=USR2@90`), or the job is being preempted."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise CellInterrupted(
        "received SIGTERM (scancel, the time limit, or, in a distributed cell, Slurm "
        "ending the job step because another rank failed: see that rank's log)"
    )


def _on_sigusr2(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # once: the job's task forwards the same signal
    raise CellTimedOut(
        "received SIGUSR2: the job's time limit is near (or it is preempted); stopped before Slurm kills it"
    )


def _causes(err: BaseException | None) -> Iterator[BaseException]:
    """An exception and what it wraps: dynamo and inductor re-raise what happened while they
    compiled as their own exception (BackendCompilerFailed, InductorError) with it as the cause."""
    while err is not None:
        yield err
        err = err.__cause__ or err.__context__


def interruption(err: BaseException) -> CellInterrupted | None:
    """The scancel or time-limit signal behind `err`, also when a compiler wrapped it (a SIGUSR2
    that came during inductor's compile was recorded as `failed`, not `timeout`)."""
    return next((cause for cause in _causes(err) if isinstance(cause, CellInterrupted)), None)


def is_out_of_memory(err: BaseException | None) -> bool:
    """CUDA OOM raises torch.OutOfMemoryError, the CPU allocator a plain RuntimeError; during
    compilation dynamo wraps either in its own exception, so the cause chain is searched."""
    return any(
        isinstance(cause, torch.OutOfMemoryError) or "can't allocate memory" in str(cause)
        for cause in _causes(err)
    )


def _now() -> datetime:
    return datetime.now(timezone.utc)


def attempt(cell: MeasuredCell, instruments: Instrument, rec: CellRecorder, ranks: Ranks) -> str:
    """Everything between a valid config (and a joined process group) and the final status: the
    cell built and measured, the ranks' steps gathered and summarised into the run row, and the
    instruments' moments around it (workloads/instruments/base.py). Returns `completed`, or
    `not_compiled` where a backend compiled nothing."""
    instruments.before_build()
    instruments.before_loop(cell.build())
    finished = False
    try:
        cell.measure(instruments)
        finished = True
    finally:
        rec.run.update(instruments.after_loop())
        own = rec.report(ranks.rank, cell.peak_memory())
        # Gathering is a collective: only once this rank's loop finished, else rank 0 keeps
        # its own steps (a rank that died would never join, and the gather would wait forever).
        cell.summarise(distributed.gather(ranks, own) if finished else [own])
        rec.run.update(instruments.after_summary(rec))
    rec.run.update(instruments.after_finished())
    return compiled_status(cell.cfg.backend, rec.run)


def run_cell(cfg: CellConfig, cell_dir: str | Path, repeat: int = 0) -> str:
    """Run one attempt of replicate `repeat` of a cell in this process and return its status;
    rank 0 (the process of a single-process cell) writes the Parquet files into `cell_dir`."""
    cell_dir = Path(cell_dir)
    cell_id = cfg.cell_id or config_digest(cfg)
    writes = distributed.launched_ranks().is_main
    rec = CellRecorder(cell_id, next_attempt(cell_dir), cfg.distributed.world_size)
    # Every axis the config gives; prepare_cell records the resolved ones (batch, arch) over them.
    rec.run.update(
        axes_from_config(cell_config_to_dict(cfg)),
        **where_it_runs(),
        repeat=repeat,
        warmup_steps=cfg.warmup_steps,
        started_at=_now(),
    )
    previous_handlers = {
        sig: signal.signal(sig, handler)
        for sig, handler in ((signal.SIGTERM, _on_sigterm), (signal.SIGUSR2, _on_sigusr2))
    }
    ranks, finished = Ranks(), False
    try:
        if _EARLY_SIGNALS:  # came while the process started: record it now, as if it came now
            signum = _EARLY_SIGNALS.pop(0)
            (_on_sigusr2 if signum == signal.SIGUSR2 else _on_sigterm)(signum, None)
        ranks = distributed.join(cfg.distributed, resolve_device(cfg.device).type)
        rec.run["dist_backend"] = ranks.backend
        # cold_warm: both compiles in a fresh cache directory of the attempt's own, not the sweep's.
        with cold_compile.private_caches(cfg):
            kind = kind_of(cfg)
            cell = kind.cell(cfg, rec, ranks)
            status = attempt(cell, kind.instruments(cell), rec, ranks)
        finished = True  # every rank took part in the gather after its loop: all are here
    except (CellInterrupted, Exception) as err:  # a failed cell is a result to record, whatever the cause
        if signalled := interruption(err):
            status = TIMEOUT if isinstance(signalled, CellTimedOut) else CANCELLED
            rec.run["error"] = str(signalled)
        elif isinstance(err, NotSupported):
            status, rec.run["error"] = NOT_SUPPORTED, str(err)
        else:
            status = OOM if is_out_of_memory(err) else FAILED
            rec.run["error"] = "".join(traceback.format_exception_only(type(err), err)).strip()
            traceback.print_exc()
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        distributed.leave(ranks, together=finished)
    rec.run.update(status=status, finished_at=_now())
    if writes:
        rec.write(cell_dir)
    return status


def take_turn(cfg: CellConfig) -> None:
    """Started ahead by the local executor (workloads/local/turns.py): import the rest of what the cell
    needs, then wait for the device, and say so in the log; a no-op for any other process."""
    if not turns.taking_turns():
        return
    # Dynamo too: every cell imports it (torch.optim's param groups are dynamo-disabled, and
    # workloads.instruments.dynamo_records counts DDP splits through it); no compile time counts its import.
    for module in filter(None, (FAMILY_LIBRARIES.get(cfg.model.name), "torch._dynamo")):
        importlib.import_module(module)
    cuda = cfg.device != "cpu" and torch.cuda.is_available()
    if cuda:
        # CUDA's context (a second or two) is made while waiting, too: it runs no kernel, and the
        # one measuring waits until this is done (done_importing below).
        torch.empty(0, device="cuda")
    if cuda and cfg.backend.name == "inductor":
        # Inductor's compile workers (Triton's: a CPU cell compiles C++ without them) import torch,
        # 5-10 s on the GPU machines, which the cell would otherwise wait for before measuring
        # (workloads/instruments/compile_workers.py).
        start_compile_workers()
        wait_until_idle(os.getpid())
    imported = _now()
    turns.done_importing()
    waited = turns.wait_for_turn()
    context = " (CUDA's context included)" if cuda else ""
    print(
        f"compilebench: process started at {_PROCESS_STARTED.isoformat()}, imported in "
        f"{(imported - _PROCESS_STARTED).total_seconds():.1f} s{context}, waited {waited:.1f} s for its turn "
        "on the device",
        file=sys.stderr,
        flush=True,
    )


def hand_over() -> None:
    """The cell's results are written: let the next replicate start on the device while this
    process exits (workloads/local/turns.py), unless this one still holds device memory that the next
    one's build and compile might need (CUDA graph pools, a tensor kept alive): then the executor
    gives the turn when this process has exited."""
    if not turns.taking_turns():
        return
    if torch.cuda.is_initialized():
        gc.collect()  # what the cell left in reference cycles, so that its blocks can be released
        torch.cuda.empty_cache()
        if torch.cuda.memory_reserved() > HAND_OVER_MAX_RESERVED:
            return
    turns.hand_over()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.run", description=__doc__.splitlines()[0])
    parser.add_argument("config", type=Path, help="resolved cell config (config.yaml)")
    parser.add_argument(
        "--cell-dir",
        type=Path,
        default=None,
        help="where to write the Parquet files (default: the config file's directory)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=0,
        metavar="R",
        help="which replicate of the cell this run is (0 .. repeats-1; default 0)",
    )
    parser.add_argument("--compile-cold", type=Path, default=None, metavar="RESULT", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        cfg = load_cell_config(args.config)
        check_cell(cfg)
    except (OSError, ConfigError) as err:
        print(f"compilebench: invalid cell config {args.config}: {err}", file=sys.stderr)
        return 2
    try:
        distributed.launched_ranks()
    except LaunchError as err:  # which rank this is decides who writes: nothing runs without it
        print(f"compilebench: cannot run cell {args.config}: {err}", file=sys.stderr)
        return 2
    if not 0 <= args.repeat < cfg.most_repeats:
        print(
            f"compilebench: --repeat {args.repeat} outside 0..{cfg.most_repeats - 1} (repeats={cfg.repeats})",
            file=sys.stderr,
        )
        return 2
    if (
        args.compile_cold
    ):  # the first process of compile.measure=cold_warm (cold_compile): no results of its own
        cold_compile.compile_cold_here(cfg, args.compile_cold, prepare_cell)
        return 0
    take_turn(cfg)
    status = run_cell(cfg, args.cell_dir or args.config.parent, args.repeat)
    print(f"cell {cfg.cell_id or config_digest(cfg)}: {status}", flush=True)
    hand_over()
    return 0 if status == COMPLETED else 1


if __name__ == "__main__":
    sys.exit(main())
