"""The same sweeps asked on two machines (issue 39, item 6): which answers are the host's, and does the
host model (analysis/cells/device_time.py `predicted_step_ms`) carry one machine's numbers to the other?

    PYTHONPATH=. python examples/benchmarks/device_time_two_machines.py \
        A@h100_..._A/device_time_gpt_small.tar.gz B@h100_..._B/device_time_gpt_small.tar.gz ...

Each argument is LABEL@PACK (a tarball under docs/results/, as docs/gpu-results.md names
them; two labels). It prints two tables, which docs/gpu-results.md also derives from the packs
(examples/benchmarks/gpu_results_doc.py, kinds `machines` and `host_model`):
- per compiled cell and machine: the wall speedup, the GPU-time ("device") speedup, each side's launches
  per step and the host's µs per launch; how far apart the two machines' centres lie;
- per side and machine: the measured step against the model's, from the side's own GPU time, launches
  and µs per launch, and against the model's from the OTHER machine's GPU time and launches with this
  machine's µs per launch (the step on a host of another speed); and the profiled windows' cost, as a
  share of the attempts' time on the GPU.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from analysis.cells.device_time import predicted_step_ms  # noqa: E402
from analysis.rendering.text import render_markdown  # noqa: E402

SIDES = {"compiled": "", "eager": "eager_"}


def _cells(packs, runs: list[str]) -> dict[str, dict[str, pd.Series]]:
    """Each compiled cell's metrics by label: {cell name: {label: its row}}."""
    cells: dict[str, dict[str, pd.Series]] = {}
    for run in runs:
        label, _, sweep = run.partition("@")
        for _, cell in packs.analysis(sweep).training.iterrows():
            if cell["backend"] != "eager":
                name = f"{cell['arch']} {cell['size']} b{cell['batch_size']} · {cell['backend']}"
                cells.setdefault(name, {})[label] = cell
    return cells


def _apart(values: list[float]) -> str:
    return f"{max(values) / min(values) - 1:.1%}" if len(values) == 2 and min(values) > 0 else ""


def _speedup(cell: pd.Series, column: str) -> str:
    return f"{cell[column]:.3f}x [{cell[f'{column}_low']:.3f}, {cell[f'{column}_high']:.3f}]"


def machines(packs, runs: list[str]) -> str:
    """Per compiled cell and machine: wall and device speedups, launches and µs per launch per side."""
    rows = []
    for name, by_label in _cells(packs, runs).items():
        for label, cell in by_label.items():
            rows.append({
                "cell": name,
                "machine": label,
                "wall speedup [95% CI]": _speedup(cell, "speedup") + ("‡" if cell["host_dependent"] else ""),
                "device speedup [95% CI]": _speedup(cell, "device_speedup"),
                "launches/step eager, compiled": (
                    f"{cell['eager_launches_per_step']:.0f}, {cell['launches_per_step']:.0f}"
                ),
                "µs/launch eager, compiled": (
                    f"{cell['eager_host_us_per_launch']:.1f}, {cell['host_us_per_launch']:.1f}"
                ),
            })  # fmt: skip
        if len(by_label) == 2:
            rows.append({
                "cell": name,
                "machine": "apart",
                "wall speedup [95% CI]": _apart([c["speedup"] for c in by_label.values()]),
                "device speedup [95% CI]": _apart([c["device_speedup"] for c in by_label.values()]),
                "launches/step eager, compiled": "equal" if _launches_equal(by_label.values()) else "differ",
            })  # fmt: skip
    columns = list(rows[0]) if rows else ["cell"]
    return render_markdown(rows, columns) + "\n"


def _launches_equal(cells) -> bool:
    counts = {(c["eager_launches_per_step"], c["launches_per_step"]) for c in cells}
    return len(counts) == 1


def _steps(cell: pd.Series, side: str) -> float:
    return cell["eager_step_ms"] if side else cell["median_step_ms"]


def _model_rows(by_label: dict[str, pd.Series]) -> Iterator[dict[str, str]]:
    for label, cell in by_label.items():
        others = [other for other_label, other in by_label.items() if other_label != label]
        for side_name, side in SIDES.items():
            measured = _steps(cell, side)
            own = cell[f"{side}predicted_step_ms"]  # the model at this side's own numbers
            host_ms = cell[f"{side}launches_per_step"] * cell[f"{side}host_us_per_launch"] / 1e3
            row = {
                "machine": label,
                "side": side_name,
                "measured ms": f"{measured:.2f}",
                "GPU ms": f"{cell[f'{side}gpu_ms']:.2f}",
                "host ms": f"{host_ms:.2f}",
                "model ms (own)": f"{float(own):.2f} ({float(own) / measured - 1:+.0%})",
            }
            if others:
                other = others[0]
                carried = predicted_step_ms(
                    other[f"{side}gpu_ms"],
                    other[f"{side}launches_per_step"],
                    cell[f"{side}host_us_per_launch"],
                )
                row["model ms (other's GPU)"] = f"{float(carried):.2f} ({float(carried) / measured - 1:+.0%})"
            yield row


def host_model(packs, runs: list[str]) -> str:
    """Per side and machine, the measured step against the model's; the windows' cost per cell."""
    rows = []
    for name, by_label in _cells(packs, runs).items():
        rows += [{"cell": name, **row} for row in _model_rows(by_label)]
    for run in runs:
        label, _, sweep = run.partition("@")
        runs = pd.concat(pd.read_parquet(path) for path in packs.sweep_dir(sweep).glob("cells/*/run.parquet"))
        done = runs[runs["profile_s"].notna()]
        held = (done["finished_at"] - done["started_at"]).dt.total_seconds().to_numpy(float)
        share = done["profile_s"].to_numpy(float) / held
        rows.append({
            "cell": f"`{sweep}`",
            "machine": label,
            "side": "windows' cost",
            "measured ms": f"{np.median(done['profile_s']):.1f} s of {np.median(held):.0f} s an attempt",
            "GPU ms": f"median {np.median(share):.1%}, at most {share.max():.1%}",
        })  # fmt: skip
    columns = ["cell", "machine", "side", "measured ms", "GPU ms", "host ms", "model ms (own)"]
    columns += ["model ms (other's GPU)"]
    return render_markdown(rows, columns) + "\n"


def main(argv: list[str]) -> int:
    import tempfile

    from examples.benchmarks.gpu_results_doc import Packs

    if not argv or any("@" not in run for run in argv):
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as root:
        packs = Packs(Path(root))
        print(machines(packs, argv))
        print(host_model(packs, argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
