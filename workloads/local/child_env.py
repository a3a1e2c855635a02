"""The environment of a process that runs the workload (`python -m workloads.run`): this one's,
with the directory that holds `workloads` on PYTHONPATH, so that it imports even without
`pip install -e`, and unbuffered output, so that its log grows while it runs.

Two kinds of process start one: the local executor (orchestrator/executors/local.py, also inside a Slurm
task) starts each cell's, and a cell of `compile.measure=cold_warm` starts its cold compile's
(workloads/instruments/cold_compile.py). This module imports no torch: a Slurm task imports the executor
without it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

#: The checkout (or site-packages) that holds `workloads` (and `orchestrator`, its sibling).
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def child_env(extra: Mapping[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, str]:
    """This process's environment without the variables named in `drop`, with PACKAGE_ROOT
    appended to PYTHONPATH, PYTHONUNBUFFERED=1, and `extra` over all that."""
    dropped = set(drop)
    env = {name: value for name, value in os.environ.items() if name not in dropped}
    # Appended, not prepended: an explicit PYTHONPATH (a test stand-in, a site package) still wins.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(PACKAGE_ROOT)) if p)
    env["PYTHONUNBUFFERED"] = "1"  # logs grow while the cell runs, for `tail -f`
    env.update(extra or {})
    return env
