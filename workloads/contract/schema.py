"""The Parquet columns of a sweep directory, and how its files are written.

Two files per cell directory: `steps.parquet` (one row per training step, every attempt) and
`run.parquet` (one row per attempt: status, summary, environment); one `manifest.parquet` per
sweep. Where they lie and how they are read is workloads/contract/sweep_dir.py; the axis columns come from
workloads/contract/vocabulary.py. Files are rewritten whole through a temporary file and `os.replace`, so a
reader sees either the old or the new file, never half of one. Bump SCHEMA_VERSION when a column
changes meaning or disappears (an added column needs none: older files read with nulls there), and
lift the older rows in workloads/contract/upgrade.py, which keeps the version history.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from workloads.contract.atomic import atomic_output
from workloads.contract.vocabulary import AXES, CONFIG_AXES

SCHEMA_VERSION = 2

#: The axis columns (workloads/contract/vocabulary.py), in run.parquet and the manifest alike.
AXIS_FIELDS = [pa.field(axis.name, axis.type) for axis in AXES]

STEPS_SCHEMA = pa.schema(
    [
        ("cell_id", pa.string()),
        ("attempt", pa.int32()),
        ("step", pa.int32()),
        ("phase", pa.string()),  # warmup | measure
        ("step_time_ms", pa.float64()),  # device synchronised at both boundaries
        ("data_time_ms", pa.float64()),  # host time spent waiting for batches inside the step
        ("loss", pa.float64()),
        ("items", pa.int64()),  # tokens (gpt) or images (vision) processed in the step, all ranks
        ("tflops", pa.float64()),  # achieved model TFLOP/s; null where FLOPs are unknown
        ("mfu", pa.float64()),  # fraction of peak (0..1) of all ranks' devices; null where no peak is known
        ("rank_step_time_ms", pa.list_(pa.float64())),  # each rank's own step time; step_time_ms is their max
        (
            "rank_data_time_ms",
            pa.list_(pa.float64()),
        ),  # each rank's wait for batches; data_time_ms is their max
        ("side", pa.string()),  # paired cells: compiled | eager (its force_eager baseline); null: unpaired
        ("pair", pa.int32()),  # paired cells' measured steps: which pair of blocks; null otherwise
        ("energy_j", pa.float64()),  # paired cells' measured steps: their block's GPU energy / its steps, J
        ("host_time_ms", pa.float64()),  # the host's time from calling the step to its return; ranks' max
    ]
)

#: What explains variance (filled by workloads/instruments/provenance.py): CPU, affinity, threads,
#: node, binding, GPU state.
PROVENANCE_FIELDS: list[pa.Field] = [
    pa.field("cpu_model", pa.string()),  # CPU model name (/proc/cpuinfo "model name", else lscpu)
    pa.field(
        "cpu_governor", pa.string()
    ),  # the frequency governor of its first allowed CPU; null: unreadable
    pa.field("cpu_affinity", pa.string()),  # CPUs this process may run on, compact: "0-7,16-23"
    pa.field("cpu_count_allowed", pa.int64()),  # number of CPUs in cpu_affinity
    pa.field("torch_threads", pa.int64()),  # torch.get_num_threads(): intra-op CPU threads
    pa.field("node_name", pa.string()),  # SLURMD_NODENAME, else the hostname
    pa.field("slurm_cpu_bind", pa.string()),  # srun's SLURM_CPU_BIND (else _TYPE+_LIST); null outside srun
    pa.field(
        "slurm_cpus", pa.int64()
    ),  # CPUs Slurm gave the task (SLURM_CPUS_PER_TASK, else the job's on this node)
    pa.field("gpu_driver", pa.string()),  # NVIDIA driver version, e.g. "570.86.15"
    pa.field("gpu_sm_clock_mhz", pa.int64()),  # SM clock, MHz, sampled at finish (under load), else at start
    pa.field("gpu_mem_clock_mhz", pa.int64()),  # memory clock, MHz, sampled like gpu_sm_clock_mhz
    pa.field("gpu_max_sm_clock_mhz", pa.int64()),  # the SM clock's maximum, MHz; below it = throttled
    pa.field("gpu_power_limit_w", pa.float64()),  # enforced power limit, W
    pa.field("gpu_temp_start_c", pa.float64()),  # GPU die temperature before the first step, °C
    pa.field("gpu_temp_end_c", pa.float64()),  # GPU die temperature after the last step, °C
    pa.field(
        "gpu_other_processes", pa.int64()
    ),  # compute processes on this GPU besides ours, max of start/end
    pa.field("gpu_other_process_list", pa.string()),  # those processes, "pid:name" comma-joined; "" if none
]

#: The host's speed and load while the cell measured (workloads/instruments/host_load.py).
HOST_LOAD_FIELDS: list[pa.Field] = [
    pa.field("host_op_us", pa.float64()),  # µs of host time per tiny op on the device, right before measuring
    pa.field("host_op_us_after", pa.float64()),  # ... the same probe right after measuring
    pa.field("host_py_us", pa.float64()),  # µs per 100 iterations of a fixed pure-Python loop, before
    pa.field("host_py_us_after", pa.float64()),  # ... and after measuring: the host probe no torch moves
    pa.field("node_cpus_busy_other", pa.float64()),  # node CPUs busy with others' work, mean over the window
    pa.field(
        "cpu_steal_share", pa.float64()
    ),  # share of node CPU time stolen by the hypervisor in the window
]
#: The cell's own compile workers (inductor's): the wait for them to go idle before measuring, and
#: their load over the window (workloads/instruments/compile_workers.py); null off Linux.
COMPILE_WORKERS_FIELDS: list[pa.Field] = [
    pa.field("compile_workers_wait_s", pa.float64()),  # s waited before measuring for them to go idle
    pa.field(
        "compile_workers_cpus", pa.float64()
    ),  # CPUs busy with them in the window (of node_cpus_busy_other)
]
#: Why the cell is fast or slow, per side (`eager_`: a paired cell's eager side, under force_eager):
#: short profiled windows after measuring (workloads/instruments/profiled_window.py); null on the
#: CPU, for distributed cells, without CUPTI (the host time: on the CPU and for distributed cells).
PROFILED_WINDOW_FIELDS: list[pa.Field] = [
    pa.field(
        "gpu_ms_per_step", pa.float64()
    ),  # the device's work (streams merged) per step: median of windows
    pa.field("eager_gpu_ms_per_step", pa.float64()),
    pa.field("gpu_ms_windows", pa.list_(pa.float64())),  # each window's GPU ms per step
    pa.field("eager_gpu_ms_windows", pa.list_(pa.float64())),
    pa.field("launches_per_step", pa.float64()),  # host calls that put work on the device (a graph: one)
    pa.field("eager_launches_per_step", pa.float64()),
    pa.field("kernels_per_step", pa.float64()),  # kernels the device ran per step
    pa.field("eager_kernels_per_step", pa.float64()),
    pa.field("gpu_busy_share", pa.float64()),  # GPU time / the windows' span (the profiler slows the host)
    pa.field("eager_gpu_busy_share", pa.float64()),
    pa.field("device_windows", pa.int64()),  # profiled windows per side
    pa.field("profiled_steps", pa.int64()),  # steps in each window
    pa.field("profiled_step_ms", pa.float64()),  # the windows' span / their steps: the profiler's cost beside
    pa.field("eager_profiled_step_ms", pa.float64()),  # ... the median step; the eager side's
    pa.field("profile_s", pa.float64()),  # wall seconds of it all: host steps, windows, traces
]
#: The GPU boards' energy from NVML's total-energy counter, read with the device synchronised at the
#: windows' ends (workloads/instruments/gpu_energy.py, docs/measurement.md "Energy"); J and W of all
#: ranks' GPUs; null on the CPU, without NVML or the counter (before Volta), in older sweeps.
ENERGY_FIELDS: list[pa.Field] = [
    pa.field("energy_j", pa.float64()),  # the measured window: the last warm-up step and all measured steps
    pa.field("energy_window_s", pa.float64()),  # the window's wall seconds (rank 0's host clock)
    pa.field("energy_window_steps", pa.int64()),  # its step rows: that warm-up step, both paired sides
    pa.field("joules_per_step", pa.float64()),  # per step of the cell's own side (paired: compiled blocks)
    pa.field("eager_joules_per_step", pa.float64()),  # per step of a paired cell's eager side, its blocks
    pa.field("items_per_joule", pa.float64()),  # items_per_step / joules_per_step
    pa.field("avg_power_w", pa.float64()),  # energy_j / energy_window_s
    pa.field("idle_power_w", pa.float64()),  # the boards' power before the cell was built, once settled
    pa.field("idle_settled", pa.bool_()),  # rank 0's board settled (<= 1% over 1 s) within 10 s, else false
    pa.field("energy_update_s", pa.float64()),  # rank 0's counter: median seconds between its updates
    pa.field("warmup_energy_j", pa.float64()),  # built cell to the last warm-up step: compile, warm-up
    pa.field("compile_energy_j", pa.float64()),  # warmup_energy_j less its steps at the measured J/step, >= 0
    pa.field("energy_edge_share", pa.float64()),  # paired: compiled blocks' seconds between their steps
]
#: model=gemm: one GEMM's time, throughput and roofline (workloads/gemm/shapes.py, docs/gemm.md), and the
#: clocks it ran at; null in training cells. How it was timed is the axis `gemm_timing`.
GEMM_FIELDS: list[pa.Field] = [
    pa.field("gemm_us", pa.float64()),  # median µs per GEMM (median_step_ms: one step is one GEMM)
    pa.field("gemm_tflops", pa.float64()),  # 2·M·N·K / gemm_us
    pa.field("gemm_bytes", pa.int64()),  # bytes moved at the least: A, B and scales read, C written once
    pa.field("gemm_gbps", pa.float64()),  # gemm_bytes / gemm_us, GB/s
    pa.field("peak_gbps", pa.float64()),  # the GPU's memory bandwidth, GB/s; null where unknown
    pa.field("gemm_floor_us", pa.float64()),  # roofline: max(flops / peak FLOP/s, bytes / peak_gbps)
    pa.field("gemm_roofline_share", pa.float64()),  # gemm_floor_us / gemm_us (0..1)
    pa.field("gemm_bound", pa.string()),  # memory | compute: the larger term of the floor
    pa.field("gemm_kernel", pa.string()),  # cublas, or the kernel inductor's autotuner chose
    pa.field("gemm_autotune_us", pa.float64()),  # the autotuner's own timing of that kernel, µs
    pa.field("gemms_per_replay", pa.int64()),  # GEMMs per CUDA-graph replay (one step row)
    # The GPU's clocks while the GEMMs ran (workloads/instruments/gpu_clocks.py; provenance's
    # gpu_sm_clock_mhz is one reading at the end): null on the CPU and without NVML (not measured).
    pa.field("sm_clock_mhz", pa.float64()),  # mean SM clock of NVML's samples in the measured window, MHz
    pa.field("clock_samples", pa.int64()),  # how many samples: taken while GEMMs were queued on the GPU
    pa.field("clock_limits", pa.string()),  # NVML's clock-limiting reasons in any sample: "sw_power_cap,..."
]
#: model=gemm with gemm.layer: the layer's GEMMs from profiled windows, each a single layer on an idle
#: device, per way: `launched` one by one from Python, `graph` replayed as one CUDA graph
#: (workloads/gemm/layer.py, docs/gemm.md "The post's layer"); null in other cells and older sweeps.
LAYER_WAYS = ("launched", "graph")
LAYER_FIELDS: list[pa.Field] = [
    *(
        pa.field(f"layer_{way}_{name}", pa.float64())
        for way in LAYER_WAYS
        for name in (
            "us",  # the layer's span on the GPU: its first kernel's start to its last one's end, median
            "idle_share",  # the span's time without a kernel running: 1 - (kernels' union / span)
            "gap_us",  # median gap between consecutive kernels
            "matmul_us",  # the union of the layer's kernels, median
            "launch_us",  # the host's time to launch the layer (unprofiled), median
            "kernels",  # kernels per layer, median
        )
    ),
    pa.field("layer_graph_speedup", pa.float64()),  # layer_launched_us / layer_graph_us
    pa.field("layer_windows", pa.int64()),  # profiled layers per way
]

#: Lookups of inductor's FX graph cache and of the AOTAutograd cache that hit, missed or
#: bypassed it (dynamo's counters: workloads/instruments/dynamo_records.py).
CACHE_COUNT_COLUMNS = (
    "fx_graph_cache_hits",
    "fx_graph_cache_misses",
    "fx_graph_cache_bypasses",
    "aot_autograd_cache_hits",
    "aot_autograd_cache_misses",
    "aot_autograd_cache_bypasses",
)

#: Why graphs broke or recompiled (workloads/instruments/dynamo_records.py): one entry per distinct reason;
#: null for backends that dynamo does not compile.
REASONS = pa.list_(pa.struct([("reason", pa.string()), ("count", pa.int64())]))

RUN_SCHEMA = pa.schema(
    [
        ("cell_id", pa.string()),
        ("attempt", pa.int32()),
        ("repeat", pa.int32()),  # which replicate of the cell (0..repeats-1) this attempt ran; null before: 0
        ("status", pa.string()),  # one of vocabulary.STATUSES
        ("error", pa.string()),
        *AXIS_FIELDS,  # batch_size and grad_accum per process, as the workload resolved them
        ("items_per_step", pa.int64()),
        ("warmup_steps", pa.int64()),
        ("measured_steps", pa.int64()),
        ("params", pa.int64()),
        ("flops_per_step", pa.float64()),
        ("peak_tflops", pa.float64()),
        ("fp8_linears", pa.int64()),  # precision=fp8: Linear layers swapped for torchao's Float8Linear
        ("fp8_skipped_head", pa.int64()),  # ... left in bf16 as the output head (lm_head, classifier)
        ("fp8_skipped_misaligned", pa.int64()),  # ... left in bf16: a dimension not divisible by 16
        ("median_step_ms", pa.float64()),
        ("mean_step_ms", pa.float64()),
        ("std_step_ms", pa.float64()),
        ("items_per_s", pa.float64()),
        ("mfu", pa.float64()),
        (
            "measured_s",
            pa.float64(),
        ),  # measured span = sum of measured step_time_ms (CUDA: device clock; CPU: host)
        ("e2e_items_per_s", pa.float64()),  # items_per_step x measured_steps / measured_s
        ("e2e_mfu", pa.float64()),  # mfu over measured_s: waits for data or for the host included
        ("data_wait_s", pa.float64()),  # waiting for batches in the measured steps: sum of their data_time_ms
        (
            "stop_reason",
            pa.string(),
        ),  # why measuring stopped: steps | min_seconds | rel_ci | max_steps | max_seconds
        ("paired", pa.bool_()),  # measured against its own eager baseline in this process
        ("paired_fallback", pa.string()),  # why not, where paired is false: measured unpaired
        ("host_ms_per_step", pa.float64()),  # the measured steps' median host_time_ms (the cell's own side)
        ("eager_host_ms_per_step", pa.float64()),  # ... of a paired cell's eager side's measured steps
        ("compile_time_s", pa.float64()),
        (
            "compile_cold_s",
            pa.float64(),
        ),  # compile.measure=cold_warm: the compile with empty caches, its own process
        (
            "compile_warm_s",
            pa.float64(),
        ),  # ... and with the caches that one left: this attempt's compile_time_s
        ("compile_cache_dir", pa.string()),  # the inductor cache directory the attempt compiled with
        ("compile_cache_warm", pa.bool_()),  # it held FX graph or AOTAutograd entries when the attempt began
        *((name, pa.int64()) for name in CACHE_COUNT_COLUMNS),  # cache lookups: hits, misses, bypasses
        ("first_step_ms", pa.float64()),
        ("graph_count", pa.int64()),
        ("graph_break_count", pa.int64()),
        ("recompile_count", pa.int64()),
        ("graph_break_reasons", REASONS),  # dynamo's message per distinct graph break, how often
        ("recompile_reasons", REASONS),  # the failed guards per distinct recompile, how often
        ("cudagraph_skips", pa.int64()),  # graphs that ran without the CUDA graphs asked for
        ("peak_mem_bytes", pa.int64()),  # the largest of the ranks'; CUDA: a paired cell's compiled side's
        ("eager_peak_mem_bytes", pa.int64()),  # a paired cell's eager side's, CUDA; null: unpaired, CPU
        ("accuracy", pa.string()),  # compiled cells' accuracy check: pass | fail_accuracy | error; null: none
        (
            "accuracy_worst_tensor",
            pa.string(),
        ),  # the quantity nearest its limit, e.g. `h.1.mlp.c_fc.weight.grad`, `h.0.ln_1.bias.update`
        ("accuracy_measure", pa.string()),  # its measure: rel_l2 | 1-cos | norm_ratio; null: older sweeps
        ("accuracy_rel_diff", pa.float64()),  # its error by that measure, compiled vs the reference
        ("accuracy_noise_floor", pa.float64()),  # ... eager's own (vs fp64, or its rerun vs itself)
        ("accuracy_tolerance", pa.float64()),  # its limit: max(tolerance, multiplier x noise floor)
        ("accuracy_reference", pa.string()),  # fp64 | eager: what errors were measured against
        ("accuracy_s", pa.float64()),  # seconds the check took (after measuring: in no other column)
        ("accuracy_error", pa.string()),  # why the check itself failed, where accuracy is error
        ("ddp_graph_splits", pa.int64()),  # extra graphs from DDPOptimizer's cuts at gradient buckets
        ("rank_hostname", pa.list_(pa.string())),
        ("rank_median_step_ms", pa.list_(pa.float64())),  # each rank's median measured step
        ("rank_compile_time_s", pa.list_(pa.float64())),  # compile_time_s from each rank's own steps
        ("rank_peak_mem_bytes", pa.list_(pa.int64())),
        ("rank_energy_j", pa.list_(pa.float64())),  # each rank's GPU's energy_j
        *PROVENANCE_FIELDS,  # what explains variance: CPU, affinity, threads, node, binding, GPU state
        *HOST_LOAD_FIELDS,  # and the host's speed and load while measuring
        *COMPILE_WORKERS_FIELDS,  # of which the cell's own compile workers'
        *PROFILED_WINDOW_FIELDS,  # and the GPU's busy share after it
        *ENERGY_FIELDS,  # the GPUs' energy
        *GEMM_FIELDS,  # model=gemm's GEMM
        *LAYER_FIELDS,  # and its layer's
        ("torch_version", pa.string()),
        ("python_version", pa.string()),  # e.g. 3.12.3: of the Python that ran the cell (its environment's)
        ("python_prefix", pa.string()),  # that Python's sys.prefix: which venv or conda env it was
        ("triton_version", pa.string()),
        ("cuda_version", pa.string()),
        ("timm_version", pa.string()),
        ("hostname", pa.string()),
        ("slurm_job_id", pa.string()),
        ("slurm_array_task_id", pa.string()),
        ("partition", pa.string()),
        ("started_at", pa.timestamp("us", tz="UTC")),
        ("finished_at", pa.timestamp("us", tz="UTC")),
        ("git_sha", pa.string()),
        ("schema_version", pa.int32()),
    ]
)

#: manifest.parquet: one row per cell of the sweep (workloads/contract/sweep_dir.py reads and writes it).
MANIFEST_SCHEMA = pa.schema(
    [
        ("cell_id", pa.string()),
        *(field for field in AXIS_FIELDS if field.name in {axis.name for axis in CONFIG_AXES}),
        ("overrides", pa.string()),  # the cell's Hydra overrides, space-separated
        ("executor", pa.string()),  # local | slurm
        ("job_id", pa.string()),  # scheduler job id of the cell's last job; null when run locally
    ]
)


def table_from_rows(rows: Iterable[Mapping[str, Any]], schema: pa.Schema) -> pa.Table:
    """Rows (dicts) to a table of exactly `schema`; missing keys become null, extra keys are an error."""
    rows = list(rows)
    names = set(schema.names)
    for row in rows:
        extra = set(row) - names
        if extra:
            raise KeyError(f"columns not in the schema: {sorted(extra)}")
    columns = {name: [row.get(name) for row in rows] for name in schema.names}
    return pa.table(columns, schema=schema)


def write_parquet_atomic(table: pa.Table, path: str | Path) -> None:
    """Write `table` to `path` so that readers never observe a partial file."""
    with atomic_output(path) as fh:
        pq.write_table(table, fh)
        fh.flush()
        os.fsync(fh.fileno())  # results survive a node that goes down right after the rename


def append_rows_atomic(path: str | Path, rows: Iterable[Mapping[str, Any]], schema: pa.Schema) -> None:
    """Append rows to a Parquet file of `schema` (created if absent), atomically."""
    new = table_from_rows(rows, schema)
    path = Path(path)
    if path.exists():
        old = pq.read_table(path, schema=schema)
        new = pa.concat_tables([old, new])
    write_parquet_atomic(new, path)
