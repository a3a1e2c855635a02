"""Where and with what a sweep ran: the environment its runs recorded, as a table of the report.

Every completed run (each replicate and attempt that completed; all runs where none did) counts
once. A text value is listed with how many runs recorded it, most frequent first; a number as the
range it took; the time as the first start and the last finish. Only the report shows it; its columns
are read with the rest of each run row (analysis/reading/collect.py), so the files are scanned once.
"""

from __future__ import annotations

import pandas as pd

from analysis.rendering.text import Table, fmt_number, fmt_percent, is_null
from workloads.contract.vocabulary import COMPLETED

#: (run.parquet column, what the table calls it), in the table's order.
FIELDS = (
    ("gpu_name", "GPU"), ("device", "device"), ("gpu_driver", "NVIDIA driver"), ("cuda_version", "CUDA"),
    ("torch_version", "torch"), ("triton_version", "triton"), ("timm_version", "timm"),
    ("cpu_model", "CPU"), ("cpu_governor", "CPU frequency governor"), ("cpu_count_allowed", "CPUs allowed"),
    ("slurm_cpus", "CPUs given by Slurm"),
    ("torch_threads", "torch threads"),
    ("node_name", "node"), ("partition", "partition"), ("slurm_cpu_bind", "CPU binding"),
    ("gpu_max_sm_clock_mhz", "max SM clock (MHz)"), ("gpu_sm_clock_mhz", "SM clock at the end (MHz)"),
    ("gpu_power_limit_w", "power limit (W)"), ("gpu_temp_start_c", "GPU temperature at start (°C)"),
    ("gpu_temp_end_c", "GPU temperature at the end (°C)"),
    ("gpu_other_processes", "other processes on the GPU"),
    ("host_op_us", "host µs per tiny op, before measuring"),
    ("host_op_us_after", "host µs per tiny op, after measuring"),
    ("host_py_us", "host µs per 100 Python loop iterations, before measuring"),
    ("host_py_us_after", "host µs per 100 Python loop iterations, after measuring"),
    ("node_cpus_busy_other", "node CPUs busy with other work, while measuring"),
    ("cpu_steal_share", "CPU time taken by the hypervisor, while measuring"),
    ("compile_workers_wait_s", "s waited for the cell's compile workers, before measuring"),
    ("compile_workers_cpus", "CPUs busy with the cell's compile workers, while measuring"),
    ("git_sha", "compilebench commit"), ("started_at", "first start"), ("finished_at", "last finish"),
)  # fmt: skip
#: A run that lost more of the node's CPU time than this to other guests is named in the note.
STEAL_NOTED = 0.05
#: Distinct text values listed per field; the rest are counted.
MAX_VALUES = 4
#: The run.parquet columns the table reads (analysis/reading/collect.py reads them with the rest).
ENVIRONMENT_READ = ("status", *(column for column, _ in FIELDS))


def _summary(column: str, values: pd.Series) -> str:
    """One field's values over the runs as text ('' where no run recorded it)."""
    values = values.dropna()
    if values.empty:
        return ""
    if column == "started_at":
        return f"{values.min():%Y-%m-%d %H:%M} UTC"
    if column == "finished_at":
        return f"{values.max():%Y-%m-%d %H:%M} UTC"
    if pd.api.types.is_numeric_dtype(values):
        low, high = values.min(), values.max()
        fmt = (lambda v: str(int(v))) if (values == values.round()).all() else fmt_number  # counts, MHz, W
        return fmt(low) if low == high else f"{fmt(low)}–{fmt(high)}"
    counts = values.astype(str).value_counts()
    listed = [
        f"{value} ({count} runs)" if len(counts) > 1 else str(value)
        for value, count in counts.iloc[:MAX_VALUES].items()
    ]
    more = len(counts) - MAX_VALUES
    return "; ".join(listed) + (f"; {more} more" if more > 0 else "")


def environment_table(attempts: pd.DataFrame) -> Table:
    """The environment of the sweep's runs (`attempts`: every attempt's run row, `SweepData.attempts`):
    one row per field that some run recorded."""
    runs = attempts
    completed = runs[runs["status"] == COMPLETED]
    runs = completed if len(completed) else runs
    rows = [
        {"field": name, "value": _summary(column, runs[column]), "column": column} for column, name in FIELDS
    ]
    data = pd.DataFrame(
        [row for row in rows if not is_null(row["value"]) and row["value"]],
        columns=["field", "value", "column"],
    )
    note = f"Over {len(runs)} {'completed ' if len(completed) else ''}runs (each replicate and attempt once)."
    unbound = int((runs["cpu_count_allowed"] > runs["slurm_cpus"]).sum())
    if unbound:
        note += (
            f" {unbound} of them could run on more CPUs than Slurm gave them: the cluster did not bind them "
            "to their cores, so other jobs on the node shared their CPUs (an inductor compile beside a "
            "measured step slows it); TaskPlugin=task/affinity or task/cgroup binds them."
        )
    stolen = int((runs["cpu_steal_share"] > STEAL_NOTED).sum())
    if stolen:
        note += (
            f" {stolen} of them measured while the hypervisor took more than {fmt_percent(STEAL_NOTED, 0)} "
            "of the node's CPU time for other guests: their host ran slower than its CPUs say, and a "
            "launch-bound step (small kernels, eager or compiled without CUDA graphs) slower with it."
        )
    return Table("environment", "Environment", data, data[["field", "value"]], note)
