"""`compilebench` command line: a thin layer over grid expansion, executors and analysis.

    compilebench sweep [OVERRIDES...] [--dry-run]     # cluster=local runs the cells here; a Slurm
                                                      # cluster (cluster=grete) submits job arrays
    compilebench status SWEEP_DIR                     # each cell's state: results, then squeue/sacct
    compilebench analyze SWEEP_DIR [--format markdown|latex|csv] [--reference seminar] [--no-plots]

Exit codes: 0 success (for Slurm: submitted); 1 a cell failed (local sweep), an sbatch failed after
earlier arrays were submitted (Slurm), not every cell completed (status), or nothing to analyse
(analyze); 2 bad input (a bad override, cluster profile, partition or GPU type; for status, a
directory that is not a sweep), reported in one line on stderr before anything runs or is submitted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compilebench", description="Does torch.compile make my training faster? Sweep, run, analyse."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sweep = commands.add_parser(
        "sweep",
        help="expand a Hydra sweep into cells and run them",
        description="Expand Hydra overrides (size=small,medium backend=glob(*) +experiment=NAME "
        "hydra.sweep.dir=DIR) into cells, write their configs and the manifest, and run every cell.",
    )
    sweep.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="Hydra override, e.g. backend=eager,inductor")
    sweep.add_argument("--dry-run", action="store_true",
                       help="print the grid and (Slurm) write the sbatch scripts it would submit; run or submit nothing")

    status = commands.add_parser("status", help="show each cell's state (exit 0 only when all completed)")
    status.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR")

    analyze = commands.add_parser(
        "analyze", help="tables, figures and a report page of a sweep directory",
        description="Per-cell statistics over measured steps, speedups with bootstrap intervals, status counts, "
        "the seminar report's tables; printed, and written with figures to SWEEP_DIR/report/ (index.md).",
    )
    analyze.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR")
    analyze.add_argument("--format", choices=("markdown", "latex", "csv"), default="markdown",
                         help="how the tables are printed; csv prints the per-cell table (report/tables/ has every "
                         "table as CSV)")
    analyze.add_argument("--reference", choices=("seminar",), default=None,
                         help="put the seminar report's published values beside ours and check its claims")
    analyze.add_argument("--plots", action=argparse.BooleanOptionalAction, default=True,
                         help="write the figures (PNG and SVG) into SWEEP_DIR/report/plots/ (default: yes)")
    return parser


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_sweep(overrides: Sequence[str], dry_run: bool) -> int:
    # Imported here so `compilebench --help` and `analyze` do not pay for Hydra's start-up.
    from analysis.collect import read_cell
    from analysis.tables import render_markdown, summarize, to_markdown
    from orchestrator.grid import GridError, expand
    from orchestrator.local import run_grid
    from orchestrator.sweep_dir import cell_dir, prepare

    try:
        grid = expand(overrides)
    except GridError as exc:
        return _error(str(exc))
    if grid.executor == "slurm":
        return sweep_slurm(grid, dry_run)
    if grid.executor != "local":
        return _error(f"unknown executor {grid.executor!r} (cluster={grid.cluster.get('name')}); use local or slurm")

    if dry_run:
        rows = grid.rows()
        print(render_markdown(rows, list(rows[0])))
        print(f"\n{len(grid.cells)} cell(s) for {grid.sweep_dir}; nothing written or run (--dry-run)")
        return EXIT_OK

    prepare(grid)
    print(f"sweep: {len(grid.cells)} cell(s) -> {grid.sweep_dir} (executor {grid.executor})", flush=True)
    outcomes = run_grid(grid)
    sys.stdout.flush()  # reading may warn on stderr; keep it after the progress lines
    summary = summarize(read_cell(cell_dir(grid.sweep_dir, cell.cell_id)) for cell in grid.cells)
    print()
    print(to_markdown(summary))
    failed = [o for o in outcomes if not o.ok]
    done = sum(o.status == "completed" for o in outcomes)
    skipped = sum(o.status == "skipped" for o in outcomes)
    print(f"\n{done} completed, {skipped} already completed, {len(failed)} failed; results in {grid.sweep_dir}")
    return EXIT_FAILED if failed else EXIT_OK


def sweep_slurm(grid, dry_run: bool) -> int:
    """Submit the grid's cells as job arrays (or only write the scripts: --dry-run); returns once submitted."""
    from analysis.tables import render_markdown
    from orchestrator.profile import ProfileError
    from orchestrator.slurm import SBATCH_DIR, SubmitError, grid_rows, plan, submit, write_dry_run
    from orchestrator.sweep_dir import prepare

    try:
        the_plan = plan(grid)
    except ProfileError as exc:
        return _error(str(exc))
    cells = sum(len(array.cells) for array in the_plan.arrays)
    skipped = len(the_plan.skipped)
    scripts = grid.sweep_dir / SBATCH_DIR
    if dry_run:
        rows = grid_rows(the_plan)
        print(render_markdown(rows, list(rows[0])))
        paths = write_dry_run(the_plan)
        print(f"\n{len(grid.cells)} cell(s): {cells} in {len(paths)} job array(s), {skipped} not submitted "
              f"(completed or queued); scripts in {scripts}/ ({', '.join(p.name for p in paths) or 'none'}); "
              "nothing submitted (--dry-run)")
        return EXIT_OK

    print(f"sweep: {len(grid.cells)} cell(s) -> {grid.sweep_dir} (executor slurm, cluster {the_plan.profile.name})",
          flush=True)
    if not the_plan.arrays:
        print(f"nothing to submit: {skipped} cell(s) completed or still queued")
        return EXIT_OK
    prepare(grid)
    try:
        submit(the_plan)
    except SubmitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.submitted:
            print(f"{exc.submitted} array(s) were submitted before; their job ids are in {grid.sweep_dir}/manifest.parquet",
                  file=sys.stderr)
        return EXIT_FAILED if exc.submitted else EXIT_USAGE
    print(f"{cells} cell(s) submitted in {len(the_plan.arrays)} job array(s), {skipped} not submitted (completed or "
          f"queued); job ids in {grid.sweep_dir}/manifest.parquet, scripts in {scripts}/")
    return EXIT_OK


def cmd_status(sweep_dir: Path) -> int:
    from orchestrator.status import NotASweep, all_completed, render, sweep_status

    try:
        rows = sweep_status(sweep_dir)
    except NotASweep as exc:
        return _error(str(exc))
    print(render(rows))
    return EXIT_OK if all_completed(rows) else EXIT_FAILED


def cmd_analyze(sweep_dir: Path, fmt: str, reference: str | None = None, plots: bool = True) -> int:
    from analysis.report import analyze, render_tables, write_report

    if not sweep_dir.is_dir():
        return _error(f"not a directory: {sweep_dir}")
    result = analyze(sweep_dir, reference)
    if result.metrics.empty:
        print(f"no cells in {sweep_dir} (expected {sweep_dir}/cells/<cell_id>/ or a manifest.parquet listing them)",
              file=sys.stderr)
        return EXIT_FAILED
    if not result.has_results:
        print(f"no results yet in {sweep_dir}: {result.count_line()}; none has a readable run.parquet",
              file=sys.stderr)
        return EXIT_FAILED
    print(render_tables(result, fmt).rstrip("\n"), flush=True)
    try:
        index = write_report(result, plots)
    except OSError as exc:
        print(f"error: report not written: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{result.count_line()}; report: {index}", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "sweep":
        # Overrides may stand on either side of --dry-run; argparse leaves the later ones over.
        unknown = [a for a in extra if a.startswith("-")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        try:
            return cmd_sweep([*args.overrides, *extra], args.dry_run)
        except KeyboardInterrupt:  # the running cell got the same SIGINT and records its own state
            print("\ninterrupted", file=sys.stderr)
            return 130
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "status":
        return cmd_status(args.sweep_dir)
    return cmd_analyze(args.sweep_dir, args.format, args.reference, args.plots)


if __name__ == "__main__":
    sys.exit(main())
