"""What explains run-to-run variance (docs/measurement.md, "Replicates"): host CPU, affinity and
threads, node, Slurm binding, and the GPU's driver, clocks, power limit, temperature and neighbours.

`start(device)` before the first step, `finish(device, values)` right after the last (the cell's
`Provenance` instrument); the dict `finish` returns holds every PROVENANCE_FIELDS column. Probes
are best effort and bounded in time: a missing tool or value gives None, never an exception.
Imports with pyarrow alone (the Parquet schema imports it); torch is imported inside the functions.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import threading
from collections.abc import Iterable
from typing import Any

from workloads.contract.schema import PROVENANCE_FIELDS
from workloads.instruments import nvml
from workloads.instruments.base import Instrument

PROBE_TIMEOUT_S = 2.0  # bound of one subprocess (nvidia-smi, lscpu); gpu_state waits 2x this + 1 s at most

_GPU_KEYS = (
    "gpu_driver",
    "gpu_sm_clock_mhz",
    "gpu_mem_clock_mhz",
    "gpu_max_sm_clock_mhz",
    "gpu_power_limit_w",
    "gpu_temp_c",
    "gpu_other_processes",
    "gpu_other_process_list",
)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 5, 7, 8} -> "0-2,5,7-8" (the kernel's cpulist format, as taskset -c reads it)."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def _run(args: list[str]) -> str | None:
    """stdout of a command that exited 0 within PROBE_TIMEOUT_S, else None."""
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo, else lscpu), None where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    # aarch64 (e.g. Grace) has no "model name" in /proc/cpuinfo; lscpu decodes the part number.
    for line in (_run(["lscpu"]) or "").splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def cpu_governor(cpu: int) -> str | None:
    """The frequency governor of CPU `cpu` (cpufreq's scaling_governor: "performance", "powersave"),
    None where there is none to read (virtual machines without cpufreq, not Linux)."""
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _slurm_cpu_bind() -> str | None:
    # srun exports its --cpu-bind as SLURM_CPU_BIND ("quiet,mask_cpu:0xF0") and in parts as
    # SLURM_CPU_BIND_TYPE ("mask_cpu:") and SLURM_CPU_BIND_LIST ("0xF0"); a batch script has none.
    env = os.environ
    parts = env.get("SLURM_CPU_BIND_TYPE", "") + env.get("SLURM_CPU_BIND_LIST", "")
    return env.get("SLURM_CPU_BIND") or parts or None


def _slurm_cpus() -> int | None:
    # A job's CPUs on this node are "16", or "16(x2)" for several nodes alike; per task when given.
    env = os.environ
    text = env.get("SLURM_CPUS_PER_TASK") or env.get("SLURM_JOB_CPUS_PER_NODE", "")
    digits = text.split("(")[0].split(",")[0]
    return int(digits) if digits.isdigit() else None


def describe_host() -> dict[str, Any]:
    """CPU model and governor, affinity, torch threads, node name, Slurm CPU binding and Slurm CPUs of
    this process."""
    try:
        allowed: set[int] | None = os.sched_getaffinity(0)  # Linux only; the binding in force, not nproc
    except (AttributeError, OSError):
        allowed = None
    try:
        import torch

        threads: int | None = torch.get_num_threads()
    except Exception:  # noqa: BLE001 - provenance never fails the attempt
        threads = None
    return {
        "cpu_model": cpu_model(),
        "cpu_governor": cpu_governor(min(allowed)) if allowed else None,
        "cpu_affinity": None if allowed is None else format_cpu_list(allowed),
        "cpu_count_allowed": None if allowed is None else len(allowed),
        "torch_threads": threads,
        "node_name": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "slurm_cpu_bind": _slurm_cpu_bind(),
        "slurm_cpus": _slurm_cpus(),
    }


def _gpu_id(device_index: int) -> tuple[str | None, int | None]:
    """(PCI bus id, cudaDeviceProp's max SM clock in MHz) of torch's CUDA device `device_index`.
    Torch counts only CUDA_VISIBLE_DEVICES, in its own order, so its index can name another GPU
    to NVML and nvidia-smi; the bus id names the same GPU to all three."""
    import torch

    if not torch.cuda.is_available():
        return None, None
    props = torch.cuda.get_device_properties(device_index)
    max_sm = int(props.clock_rate // 1000) if getattr(props, "clock_rate", 0) else None  # kHz
    if not hasattr(props, "pci_bus_id"):  # older torch: no way to name the GPU to NVML
        return None, max_sm
    return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0", max_sm


def _state(
    driver: Any, sm: Any, mem: Any, max_sm: Any, power_w: Any, temp: Any, procs: list[tuple[int, str]] | None
) -> dict[str, Any]:
    """gpu_state's dict. Our own pid is left out of `procs`; in a PID namespace (some containers)
    the driver reports host pids, and there this process may count itself as one other."""
    rest = sorted({(pid, name) for pid, name in procs or [] if pid is not None and pid != os.getpid()})
    return dict(
        zip(
            _GPU_KEYS,
            (
                driver,
                sm,
                mem,
                max_sm,
                power_w,
                temp,
                None if procs is None else len(rest),
                None if procs is None else ",".join(f"{pid}:{name}" for pid, name in rest),
            ),
        )
    )


def _nvml_state(bus_id: str) -> dict[str, Any] | None:
    """The GPU's state through NVML (workloads/instruments/nvml.py), or None without it."""
    get = nvml.value_or_none
    with nvml.session() as nv:
        if nv is None:
            return None
        try:
            h = nv.nvmlDeviceGetHandleByPciBusId(bus_id)
            driver, power_mw = get(nv.nvmlSystemGetDriverVersion), get(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            temp = get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            running = get(nv.nvmlDeviceGetComputeRunningProcesses, h)
            procs = (
                None
                if running is None
                else [
                    (p.pid, os.path.basename(str(get(nv.nvmlSystemGetProcessName, p.pid) or "?")))
                    for p in running
                ]
            )
            return _state(
                driver.decode() if isinstance(driver, bytes) else driver,  # old pynvml gave bytes
                get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                get(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                None if power_mw is None else power_mw / 1000.0,
                None if temp is None else float(temp),
                procs,
            )
        except Exception:  # noqa: BLE001 - e.g. a bus id NVML does not know
            return None


def _number(text: str, kind: type) -> Any:
    try:
        return kind(float(text))
    except (ValueError, OverflowError):  # "[N/A]", "[Not Supported]"
        return None


def _smi_state(bus_id: str) -> dict[str, Any] | None:
    """The GPU's state through nvidia-smi (two queries, each bounded), or None without it."""
    out = _run(
        [
            "nvidia-smi",
            "--query-gpu=driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu",
            "--format=csv,noheader,nounits",
            "-i",
            bus_id,
        ]
    )
    cols = [c.strip() for c in (out or "").strip().split("\n")[0].split(",")]
    if len(cols) != 6:
        return None
    apps = _run(
        ["nvidia-smi", "--query-compute-apps=pid,process_name", "--format=csv,noheader", "-i", bus_id]
    )
    procs = (
        None
        if apps is None
        else [
            (_number(pid, int), os.path.basename(name.strip()))
            for pid, _, name in (line.partition(",") for line in apps.splitlines() if line.strip())
        ]
    )
    return _state(
        cols[0] or None,
        _number(cols[1], int),
        _number(cols[2], int),
        _number(cols[3], int),
        _number(cols[4], float),
        _number(cols[5], float),
        procs,
    )


def gpu_state(device_index: int) -> dict[str, Any]:
    """Driver, clocks, power limit, temperature (`gpu_temp_c`) and other compute processes of
    torch's CUDA device `device_index`; all None without a GPU, NVML or nvidia-smi."""
    found: dict[str, Any] = {}
    try:
        bus_id, torch_max_sm = _gpu_id(device_index)  # torch's own CUDA: not a probe to bound
    except Exception:  # noqa: BLE001 - provenance never fails the attempt
        bus_id, torch_max_sm = None, None

    def probe() -> None:
        try:
            found.update(_nvml_state(bus_id) or _smi_state(bus_id) or {})
        except Exception:  # noqa: BLE001
            pass

    timed_out = False
    if bus_id:
        # In a daemon thread joined for a bounded time: a wedged driver can hang NVML itself.
        worker = threading.Thread(target=probe, name="gpu-provenance", daemon=True)
        worker.start()
        worker.join(2 * PROBE_TIMEOUT_S + 1.0)  # nvidia-smi's two queries, each bounded, plus slack
        timed_out = worker.is_alive()
    state = {key: None if timed_out else found.get(key) for key in _GPU_KEYS}
    if state["gpu_max_sm_clock_mhz"] is None:
        state["gpu_max_sm_clock_mhz"] = torch_max_sm  # cudaDeviceProp.clockRate: all torch offers
    return state


def _cuda_index(device: Any) -> int | None:
    """Torch's CUDA index of `device` (torch.device, "cuda:1", int), None for the CPU."""
    try:
        import torch

        device = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
        if device.type != "cuda" or not torch.cuda.is_available():
            return None
        return torch.cuda.current_device() if device.index is None else device.index
    except Exception:  # noqa: BLE001 - provenance never fails the attempt
        return None


def start(device: Any) -> dict[str, Any]:
    """Every PROVENANCE_FIELDS column known before the first step (call it then); the GPU ones
    stay None on the CPU."""
    values: dict[str, Any] = dict.fromkeys(f.name for f in PROVENANCE_FIELDS)
    values.update(describe_host())
    index = _cuda_index(device)
    if index is not None:
        gpu = gpu_state(index)
        values["gpu_temp_start_c"] = gpu.pop("gpu_temp_c")
        values.update(gpu)
    return values


def finish(device: Any, started: dict[str, Any]) -> dict[str, Any]:
    """`started` completed right after the last step (call it then, while the clocks are still at
    their working speed): end temperature, clocks under load, the most other processes seen."""
    values = dict(started)
    index = _cuda_index(device)
    if index is None:
        return values
    gpu = gpu_state(index)
    values["gpu_temp_end_c"] = gpu.pop("gpu_temp_c")
    if (values.get("gpu_other_processes") or 0) > (gpu["gpu_other_processes"] or 0):
        del gpu["gpu_other_processes"], gpu["gpu_other_process_list"]  # start saw more: keep those
    values.update(
        {key: value for key, value in gpu.items() if value is not None}
    )  # a failed probe keeps start's
    return values


class Provenance(Instrument):
    """`start` once the cell is built, `finish` right after the loop (after the host's load: the GPU
    probes run nvidia-smi, not part of the measured window)."""

    def __init__(self) -> None:
        self._device: Any = None
        self._started: dict[str, Any] = {}

    def before_loop(self, cell: Any) -> None:
        self._device = cell.device
        self._started = start(cell.device)

    def after_loop(self) -> dict[str, Any]:
        return finish(self._device, self._started)  # rank 0's: its GPU, its host
