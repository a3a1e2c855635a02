"""The arguments of the `compilebench` command line: every command's flags, their help and checks.

`sweep --help` ends with the config groups and their values, read from the config directories
when asked (orchestrator/grid/config_groups.py); the rest is argparse's. The flags of `sweep` that
go together or not are checked in its request (orchestrator/cli/request.py).
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.executors.base import UNANSWERED_LIMIT_S, WAIT_INTERVAL_S
from orchestrator.grid.config_groups import groups_help
from orchestrator.grid.package_data import version
from orchestrator.sweep.bisection import QUANTITIES


class _SweepHelp(argparse.Action):
    """-h/--help of `sweep`: argparse's help followed by the config groups and their values, read
    from the config directories (those of a --config-dir given before --help too)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        parser.epilog = groups_help(getattr(namespace, "config_dir", None) or ())
        parser.print_help()
        parser.exit()


class _DefaultsAtHome(argparse.HelpFormatter):
    """Help whose flags name the home of their default (`default_home`, `module:NAME` in analysis)
    and show its value, read from there only when the help is shown: the analysis imports pandas,
    which `compilebench --help` and `sweep` should not pay for."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        home = getattr(action, "default_home", None)
        if home is None:
            return action.help
        module, name = home.split(":")
        return f"{action.help} (default: {getattr(importlib.import_module(module), name):g})"


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The parser of `compilebench` and its commands sweep, status, analyze, bisect and compare."""
    parser = argparse.ArgumentParser(
        prog="compilebench", description="Does torch.compile make my training faster? Sweep, run, analyse."
    )
    parser.add_argument("--version", action="version", version=f"compilebench {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sweep = commands.add_parser(
        "sweep",
        add_help=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        help="expand a Hydra sweep into cells and run them",
        description=(
            "Expand Hydra overrides (size=small,medium backend=glob(*) +experiment=NAME "
            "hydra.sweep.dir=DIR)\n"
            "into cells, write their configs and the manifest, and run every cell (a sweep is always a "
            "multirun)."
        ),
    )
    sweep.add_argument(
        "-h", "--help", action=_SweepHelp, help="show this help and the config groups, then exit"
    )
    sweep.add_argument(
        "overrides", nargs="*", metavar="OVERRIDE", help="Hydra override, e.g. backend=eager,inductor"
    )
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="print the grid and (Slurm) write the sbatch scripts it would submit; run or submit nothing",
    )
    sweep.add_argument(
        "--smoke",
        action="store_true",
        help="run every cell here first, at the tiny size for 2+1 steps (sizes collapse into one), "
        "into SWEEP_DIR/smoke: catches failures before spending an allocation; submits nothing",
    )
    sweep.add_argument(
        "--wait",
        action="store_true",
        help="(Slurm) after submitting, follow the jobs until no cell is queued, then print the status "
        "table; exit 0 only if every cell completed (repeats=auto needs it: round after round). A local "
        "sweep runs in the foreground anyway",
    )
    sweep.add_argument(
        "--poll",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help=f"with --wait: seconds between looks at the queue after the first, which comes at once "
        f"(default: {WAIT_INTERVAL_S:g}, gentle on a shared scheduler)",
    )
    sweep.add_argument(
        "--give-up",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help=f"with --wait: stop waiting once the scheduler's queue has not answered for this long; the "
        f"jobs run on (default: {UNANSWERED_LIMIT_S:g})",
    )
    sweep.add_argument(
        "-m",
        "--multirun",
        action="store_true",
        help="accepted as in Hydra; changes nothing: a sweep is always a multirun",
    )
    sweep.add_argument(
        "-c",
        "--cfg",
        choices=("job",),
        help="print each cell's resolved config (YAML documents, as its config.yaml will hold it) "
        "and run, submit or write nothing",
    )
    sweep.add_argument(
        "--first",
        type=int,
        default=None,
        metavar="N",
        help="with --cfg job: print only the first N cells' configs (default: every cell)",
    )
    sweep.add_argument(
        "--config-dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="add DIR to the config search path after the shipped configs, as Hydra's --config-dir: a "
        "site's own DIR/cluster/<site>.yaml (or experiment/, ...) becomes cluster=<site>; repeatable",
    )

    status = commands.add_parser("status", help="show each cell's state (exit 0 only when all completed)")
    status.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR")
    status.add_argument(
        "--json",
        action="store_true",
        help="print the states as JSON (per cell: axes, state, attempts, job ids, error) instead of "
        "the table",
    )
    status.add_argument(
        "--retry-failed",
        action="store_true",
        help="then run again the cells that failed or are unfinished and not queued (Slurm: submit "
        "them; local: run them here); exit 0 when that succeeded",
    )

    analyze = commands.add_parser(
        "analyze",
        formatter_class=_DefaultsAtHome,
        help="tables, figures and a report page of a sweep directory",
        description=(
            "Per-cell statistics over measured steps, speedups with bootstrap intervals, status counts, "
            "the seminar report's tables; printed, and written with figures to SWEEP_DIR/report/ "
            "(index.html, index.md)."
        ),
    )
    analyze.add_argument("sweep_dir", type=Path, metavar="SWEEP_DIR")
    analyze.add_argument(
        "--format",
        choices=("markdown", "latex", "csv", "json"),
        default="markdown",
        help="how the tables are printed; csv and json print the per-cell table with raw numbers "
        "(json: one record per cell; report/tables/ has every table as CSV)",
    )
    analyze.add_argument(
        "--full",
        action="store_true",
        help="print the per-cell table with every column (default: a compact one that fits a terminal; "
        "csv, json and the report always have every column)",
    )
    analyze.add_argument(
        "--reference",
        choices=("seminar", "fp8_triton"),
        default=None,
        help="put a publication's values beside ours and judge its claims: seminar (the seminar report's "
        "tables), fp8_triton (the FP8 GEMM post's claims, against the sweep's GEMM cells)",
    )
    analyze.add_argument(
        "--plots",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write the figures (PNG and SVG) into SWEEP_DIR/report/plots/ (default: yes)",
    )
    _equivalence(
        analyze,
        "margin of practical equivalence, e.g. 0.02: a speedup whose 95%% interval lies within "
        "1 ± MARGIN is 'no difference' (not faster, slower or a disagreement with a claim), and "
        "replicates are unstable only where they disagree by more (default: the equivalence a "
        "repeats=auto sweep was decided with, else 0.02: within 1 ± 2%%)",
    )
    data_bound = analyze.add_argument(
        "--data-bound",
        type=_fraction(below_one=False),
        default=None,
        metavar="FRACTION",
        help="a cell that spends more than this share of its step time waiting for data is "
        "data-bound: its verdicts rest on end-to-end throughput, not the median step",
    )
    data_bound.default_home = "analysis.statistics.verdicts:DATA_BOUND"  # type: ignore[attr-defined]
    launch_bound = analyze.add_argument(
        "--launch-bound",
        type=_fraction(below_one=False),
        default=None,
        metavar="FRACTION",
        help="a side (compiled or eager) whose GPU idles more than this share of its measured step (and "
        "that is not data-bound) is labelled launch-bound: the host, not its kernels, sets its pace",
    )
    launch_bound.default_home = "analysis.cells.device_time:LAUNCH_BOUND"  # type: ignore[attr-defined]

    bisect = commands.add_parser(
        "bisect",
        formatter_class=_DefaultsAtHome,
        help="neighbours of an ordered list of environments where one cell's answer changed",
        description=(
            "Given one compiled cell (a sweep's overrides, backend=NAME) and environment=A,B,...,Z in order, "
            "run the ends, then only the environments a binary search needs, each as a sweep into one "
            "sweep directory, and name the neighbours where the answer changes, with their numbers: one "
            "change between A and Z, as a binary search assumes the answer changes once. --all runs every "
            "environment and judges each neighbouring pair, for an answer that may change back. Exit 0 "
            "when a change is named (--all: every pair decided); 1 when the ends do not differ (within "
            "noise), an environment is undecided, the neighbours found cannot be told apart (a drift), or "
            "(--all) no pair changed or one is undecided; 2 for bad input."
        ),
    )
    bisect.add_argument(
        "overrides", nargs="*", metavar="OVERRIDE", help="Hydra override, e.g. environment=a,b,c,d"
    )
    bisect.add_argument(
        "--all",
        action="store_true",
        help="run every environment and judge each neighbouring pair, naming every change: for an answer "
        "that may change and change back, which a binary search cannot see",
    )
    bisect.add_argument(
        "--quantity",
        choices=tuple(QUANTITIES),
        default="speedup",
        help="the answer followed: the speedup over eager, the eager or compiled median step, or the "
        "status (a cell newly failing or newly working is a change for every quantity)",
    )
    _equivalence(
        bisect,
        "margin of practical equivalence: a change whose 95%% interval lies within 1 ± MARGIN is "
        "no change (default: analyze's, 0.02)",
    )
    bisect.add_argument(
        "--config-dir",
        action="append",
        type=Path,
        metavar="DIR",
        help="add DIR to the config search path, as for sweep; repeatable",
    )

    compare = commands.add_parser(
        "compare",
        formatter_class=_DefaultsAtHome,
        help="the same cells in two sweeps: ratios B/A with intervals, regressions (exit 1)",
        description=(
            "Match the cells of SWEEP_B with those of SWEEP_A by their axes (not torch version, cluster, "
            "GPU or date) and print B/A of the median step time and of end-to-end throughput with 95%% "
            "intervals. A regression: the step time interval above 1 + THRESHOLD, not a host change. Exit 1 "
            "when there is one, else 0; 2 for bad input."
        ),
    )
    compare.add_argument("sweep_a", type=Path, metavar="SWEEP_A", help="the reference sweep (before)")
    compare.add_argument("sweep_b", type=Path, metavar="SWEEP_B", help="the sweep compared with it (after)")
    threshold = compare.add_argument(
        "--threshold",
        type=_fraction(below_one=True),
        default=None,
        metavar="FRACTION",
        help="a cell regresses when B's median step is slower than A's by more than this at 95%% confidence",
    )
    threshold.default_home = "analysis.compare:THRESHOLD"  # type: ignore[attr-defined]
    compare.add_argument(
        "--format",
        choices=("markdown", "json"),
        default="markdown",
        help="a table and lists (markdown) or one JSON object",
    )
    return parser


def _equivalence(parser: argparse.ArgumentParser, text: str) -> None:
    """`--equivalence MARGIN`: a fraction in [0, 1), None where not given (the command's default)."""
    parser.add_argument(
        "--equivalence", type=_fraction(below_one=True), default=None, metavar="MARGIN", help=text
    )


def _fraction(below_one: bool) -> Callable[[str], float]:
    """An argparse type: a number in [0, 1) (`below_one`) or [0, 1]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not (0 <= value < 1 if below_one else 0 <= value <= 1):
            raise argparse.ArgumentTypeError(f"{text} is not a fraction in [0, 1{')' if below_one else ']'}")
        return value

    return parse
