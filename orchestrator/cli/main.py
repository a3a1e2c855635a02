"""`compilebench` command line: a thin layer over grid expansion, executors and analysis (its
flags and their help: orchestrator/cli/args.py).

    compilebench sweep [OVERRIDES...] [--dry-run]     # cluster=local runs the cells here; a Slurm
                                                      # cluster (cluster=grete) submits job arrays
    compilebench sweep [OVERRIDES...] --smoke         # every cell here first, tiny, 2+1 steps
                                                      # (SWEEP_DIR/smoke)
    compilebench sweep [OVERRIDES...] --wait          # Slurm: then follow the jobs (cells per state
                         [--poll SECONDS]             # at once, then every --poll s) and print the status
                         [--give-up SECONDS]          # table; stop after --give-up s of a queue that does
                                                      # not answer (their defaults: `sweep --help`)
    compilebench sweep [OVERRIDES...] --cfg job       # print each cell's resolved config, run nothing
    compilebench sweep --config-dir DIR [OVERRIDES...] # a site's own profiles (DIR/cluster/<site>.yaml)
    compilebench status SWEEP_DIR [--retry-failed | --json]  # each cell's state: results, then the queue;
                                                      # then run the failed and unfinished cells again
    compilebench analyze SWEEP_DIR [--format markdown|latex|csv|json] [--reference seminar] [--no-plots]
                         [--equivalence MARGIN] [--data-bound FRACTION] [--launch-bound FRACTION]
    compilebench compare SWEEP_A SWEEP_B [--threshold FRACTION] [--format markdown|json]
                                                      # B against A, cell by cell: exit 1 on a regression
    compilebench bisect [OVERRIDES...] environment=A,B,...,Z [--equivalence MARGIN] [--all]
                         [--quantity speedup|eager_step|compiled_step|status]
                                                      # neighbours where one cell's answer changed

`--wait` changes nothing for a local sweep, which runs in the foreground anyway; Ctrl-C stops
the waiting, not the jobs. `--retry-failed` runs again only cells that neither completed nor
have a job in the queue (failed, oom, timeout, cancelled, not_compiled, lost, not run), through
the sweep's own executor: Slurm job arrays as `sweep` submits them, or a local run here.

Exit codes: 0 success (for Slurm: submitted; with --wait: every cell completed; with
--retry-failed: resubmitted, or nothing to retry); 1 a cell failed (local sweep or local retry),
an sbatch failed after earlier arrays were submitted (Slurm), not every cell completed (status,
sweep --wait, also when it gave up on a queue that did not answer), nothing to analyse
(analyze), a regression (compare), or no one change named (bisect: ends within noise, an environment
or pair undecided, a drift; with --all: no change, or a pair undecided);
2 bad input (a bad override, cluster profile, config dir,
partition or GPU type, a Hydra launcher or sweeper, repeats=auto on Slurm without --wait; for
status, a directory that is not a sweep; for compare, a path that is not a sweep, or two sweeps
without a common cell), reported in one line on stderr before anything runs or is submitted;
130 Ctrl-C (for --wait: the jobs keep running), 130 or 143 SIGINT or SIGTERM while arrays are
submitted (after the array in flight is recorded; the same command again submits the rest).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.args import build_parser
from orchestrator.cli.request import SweepRequest, UsageError
from orchestrator.executors.base import EXIT_FAILED, EXIT_OK, EXIT_USAGE

if TYPE_CHECKING:  # cells imports the vocabulary (~180 ms), status pandas: only commands that need them
    from orchestrator.executors.status import CellStatus
    from orchestrator.grid.cells import Grid


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_sweep(request: SweepRequest) -> int:
    """`compilebench sweep`: expand, then print the configs (--cfg job), write a dry run, or run the
    sweep through the driver; the request's flags were checked when it was built."""
    # Imported here so `compilebench --help` and `analyze` do not pay for Hydra's start-up.
    from analysis.rendering.text import render_markdown
    from orchestrator.executors.base import ExecutorError
    from orchestrator.executors.choice import executor_for
    from orchestrator.grid.expand import GridError, expand
    from workloads.contract.sweep_dir import SweepDirError, check_sweep_dir

    overrides, config_dirs = request.overrides, request.config_dirs
    try:
        grid = (
            smoke_of(overrides, config_dirs) if request.smoke else expand(overrides, config_dirs=config_dirs)
        )
        if request.cfg:
            return print_configs(grid, request.first)
        check_sweep_dir(grid.sweep_dir.parent if request.smoke else grid.sweep_dir)
        executor = executor_for(grid)
        the_plan = executor.plan(grid)
    except (GridError, SweepDirError, ExecutorError) as exc:
        return _error(str(exc))
    if request.dry_run:
        rows = executor.rows(the_plan)
        print(render_markdown(rows, list(rows[0])))
        print(f"\n{executor.dry_run(the_plan)}")
        return EXIT_OK
    from orchestrator.sweep.driver import drive

    return drive(executor, the_plan, grid, request.follow)


def print_configs(grid: Grid, first: int | None) -> int:
    """--cfg job: each cell's resolved config as a YAML document (what its config.yaml will hold),
    headed by a comment naming the cell and its overrides; the first `first` cells only if given."""
    from workloads.contract.sweep_dir import config_yaml

    shown = grid.cells[:first]
    for number, cell in enumerate(shown, 1):
        overrides = " ".join(cell.overrides) or "(defaults)"
        print(f"--- # cell {number}/{len(grid.cells)} {cell.cell_id} ({cell.label}): {overrides}")
        print(config_yaml(cell.config), end="")
    if len(shown) < len(grid.cells):
        print(
            f"# {len(shown)} of {len(grid.cells)} cells shown (--first {first}); nothing run", file=sys.stderr
        )
    return EXIT_OK


def smoke_of(overrides: Sequence[str], config_dirs: Sequence[Path] = ()) -> Grid:
    """--smoke: the sweep's grid checked as for submission (Slurm: its profile too), then its
    smoke grid, which the local executor runs."""
    from orchestrator.executors.choice import executor_for
    from orchestrator.grid.expand import smoke_grid

    full, smoke = smoke_grid(overrides, config_dirs)
    executor_for(full).check(full)
    print(
        f"smoke: the sweep's {len(full.cells)} cell(s) as {len(smoke.cells)} tiny cell(s) of 2+1 steps here",
        flush=True,
    )
    return smoke


def cmd_status(sweep_dir: Path, retry_failed: bool = False, as_json: bool = False) -> int:
    from orchestrator.executors.status import NotASweep, all_completed, sweep_status, to_json
    from orchestrator.sweep.tables import status_table

    if as_json and retry_failed:
        return _error("--json prints the states only: run --retry-failed without it")
    try:
        rows = sweep_status(sweep_dir)
    except NotASweep as exc:
        return _error(str(exc))
    print(to_json(sweep_dir, rows) if as_json else status_table(rows))
    if retry_failed:
        return retry(sweep_dir, rows)
    return EXIT_OK if all_completed(rows) else EXIT_FAILED


def retry(sweep_dir: Path, rows: Sequence[CellStatus]) -> int:
    """--retry-failed: run again the cells that did not complete and are not queued, through the
    sweep's own executor (Slurm: job arrays, job ids into the manifest; local: here, in turn)."""
    from orchestrator.executors.base import ExecutorError
    from orchestrator.executors.choice import executor_for
    from orchestrator.executors.status import RETRY, to_retry
    from orchestrator.grid.files import read_grid
    from orchestrator.sweep.driver import drive
    from workloads.contract.sweep_dir import SweepDirError
    from workloads.contract.vocabulary import count_states

    todo = to_retry(rows)
    if not todo:
        print(f"\nnothing to retry: no cell is {', '.join(RETRY[:-1])} or {RETRY[-1]}")
        return EXIT_OK
    try:
        grid = read_grid(sweep_dir)
        executor = executor_for(grid)
        only = {row.cell_id for row in todo}
        the_plan = executor.plan(grid, only=only)
    except (SweepDirError, ExecutorError) as exc:
        return _error(str(exc))
    print(f"\nretrying {len(todo)} cell(s): {count_states(row.state for row in todo)}", flush=True)
    return drive(executor, the_plan, grid, only=only)


def cmd_analyze(
    sweep_dir: Path,
    fmt: str,
    reference: str | None = None,
    plots: bool = True,
    equivalence: float | None = None,
    data_bound: float | None = None,
    launch_bound: float | None = None,
    full: bool = False,
) -> int:
    from analysis.cells.device_time import LAUNCH_BOUND
    from analysis.cells.loaded import Settings
    from analysis.report import analyze, render_tables, write_report
    from analysis.statistics.verdicts import DATA_BOUND

    if not sweep_dir.is_dir():
        return _error(f"not a directory: {sweep_dir}")
    settings = Settings(
        equivalence=equivalence,
        data_bound=DATA_BOUND if data_bound is None else data_bound,
        launch_bound=LAUNCH_BOUND if launch_bound is None else launch_bound,
    )
    result = analyze(sweep_dir, reference, settings=settings)
    if result.metrics.empty:
        print(
            f"no cells in {sweep_dir} "
            f"(expected {sweep_dir}/cells/<cell_id>/ or a manifest.parquet listing them)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if not result.has_results:
        print(
            f"no results yet in {sweep_dir}: {result.count_line()}; none has a readable run.parquet",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(render_tables(result, fmt, full).rstrip("\n"), flush=True)
    try:
        index = write_report(result, plots)
    except OSError as exc:
        print(f"error: report not written: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{result.count_line()}; report: {index.with_suffix('.html')} (and {index.name})", file=sys.stderr)
    return EXIT_OK


def cmd_compare(sweep_a: Path, sweep_b: Path, threshold: float | None, fmt: str) -> int:
    from analysis.cells.loaded import open_sweep
    from analysis.compare import THRESHOLD, CompareError, compare, to_json, to_markdown
    from workloads.contract.sweep_dir import is_sweep_dir

    for sweep in (sweep_a, sweep_b):
        if not is_sweep_dir(sweep):
            return _error(f"not a sweep directory (no manifest.parquet, no cells/): {sweep}")
    try:
        opened = [open_sweep(sweep) for sweep in (sweep_a, sweep_b)]
        result = compare(*opened, THRESHOLD if threshold is None else threshold)
    except CompareError as exc:
        return _error(str(exc))
    print(to_json(result) if fmt == "json" else to_markdown(result, sweep_a, sweep_b))
    return EXIT_FAILED if len(result.regressions) else EXIT_OK


def cmd_bisect(
    overrides: Sequence[str],
    quantity: str,
    equivalence: float | None,
    config_dirs: Sequence[Path] = (),
    every: bool = False,
) -> int:
    """`compilebench bisect`: the binary search, or with `every` (--all) every neighbouring pair."""
    from analysis.statistics.verdicts import EQUIVALENCE
    from orchestrator.executors.base import ExecutorError
    from orchestrator.grid.expand import GridError
    from orchestrator.sweep.bisect_probes import BisectError, answer, probes_for
    from workloads.contract.sweep_dir import SweepDirError

    try:
        probes = probes_for(
            overrides, quantity, EQUIVALENCE if equivalence is None else equivalence, config_dirs
        )
    except (GridError, BisectError, SweepDirError, ExecutorError) as exc:
        return _error(str(exc))
    try:
        return answer(probes, every)
    except BisectError as exc:
        return _error(str(exc))


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command in ("sweep", "bisect"):
        # Overrides may stand on either side of --dry-run; argparse leaves the later ones over.
        unknown = [a for a in extra if a.startswith("-")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "sweep":
            try:
                request = SweepRequest.from_args(args, extra)
            except UsageError as exc:
                return _error(str(exc))
            return cmd_sweep(request)
        if args.command == "status":
            return cmd_status(args.sweep_dir, args.retry_failed, args.json)
        if args.command == "bisect":
            return cmd_bisect(
                [*args.overrides, *extra], args.quantity, args.equivalence, args.config_dir or (), args.all
            )
    except KeyboardInterrupt:  # a running local cell got the same SIGINT and records its own state
        print("\ninterrupted", file=sys.stderr)
        return 130
    if args.command == "compare":
        return cmd_compare(args.sweep_a, args.sweep_b, args.threshold, args.format)
    return cmd_analyze(
        args.sweep_dir,
        args.format,
        args.reference,
        args.plots,
        args.equivalence,
        args.data_bound,
        args.launch_bound,
        args.full,
    )


if __name__ == "__main__":
    sys.exit(main())
