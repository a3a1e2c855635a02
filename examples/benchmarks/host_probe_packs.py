"""`compare` of the committed suite packs G and K (docs/gpu-results.md, the host-change verdict) with the
probe they have, `host_op_us` before measuring, in place of `host_py_us` (which they predate): does the
tiny torch op's ratio explain the launch-bound steps' change?

    PYTHONPATH=. python examples/benchmarks/host_probe_packs.py
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
from pathlib import Path

import analysis.compare.host_probe as host_probe
from analysis.cells.loaded import open_sweep
from analysis.compare import compare

sys.path.insert(0, str(Path(__file__).parent))
from gpu_results_doc import sweep_dirs  # noqa: E402

PACKS = (
    "h100_2026-11-28_device_time_G_958ddc5/device_time_suite_moved.tar.gz",
    "h100_2026-11-28_device_time_K_4782de5/device_time_suite_moved.tar.gz",
)
COLUMNS = [
    "label", "step_ratio", "a_probe_us", "b_probe_us", "probe_ratio", "probe_ratio_low", "probe_ratio_high",
    "probe_interval", "predicted_step_ratio", "verdict", "a_hosts", "b_hosts",
]  # fmt: skip


def main() -> None:
    host_probe.PROBE_COLUMNS = ("host_op_us", "host_op_us_after")
    sweeps = []
    for pack in PACKS:
        target = Path(tempfile.mkdtemp())
        with tarfile.open(Path(__file__).parents[2] / "docs" / "results" / pack) as tar:
            tar.extractall(target, filter="data")
        sweeps.append(open_sweep(sweep_dirs(target)[0], warn=None))
    print(compare(*sweeps).cells[COLUMNS].to_string())


if __name__ == "__main__":
    main()
