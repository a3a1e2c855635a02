"""workloads/instruments/provenance.py on a machine without a GPU: the host columns against what the kernel
says, the GPU probes through a stand-in nvidia-smi, and every probe bounded and exception-free.
A real GPU is described in the GPU tier (tests/gpu/test_gpu_tier.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from analysis.cells.loaded import open_sweep
from analysis.reading.environment import environment_table
from tests.helpers.analysis_sweeps import write_cell
from workloads.contract.schema import PROVENANCE_FIELDS
from workloads.instruments import provenance
from workloads.instruments.provenance import (
    describe_host,
    finish,
    format_cpu_list,
    gpu_state,
    start,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
GPU_KEYS = provenance._GPU_KEYS


def _host_in_subprocess(env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()) -> dict:
    code = (
        "import json; from workloads.instruments.provenance import describe_host; "
        "print(json.dumps(describe_host()))"
    )
    out = subprocess.run(
        [*prefix, sys.executable, "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_fields_are_unique_pyarrow_fields_and_take_the_start_and_finish_rows() -> None:
    assert all(isinstance(field, pa.Field) for field in PROVENANCE_FIELDS)
    names = [field.name for field in PROVENANCE_FIELDS]
    assert len(names) == len(set(names))
    row = finish("cpu", start("cpu"))
    assert list(row) == names
    table = pa.Table.from_pylist([row], schema=pa.schema(PROVENANCE_FIELDS))  # types fit the values
    assert table.num_rows == 1


def test_module_imports_without_torch() -> None:
    code = "import sys, workloads.instruments.provenance; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True, timeout=60)


@pytest.mark.parametrize(
    "cpus, text",
    [
        ({0, 1, 2, 5, 7, 8}, "0-2,5,7-8"),
        ({0}, "0"),
        (set(), ""),
        ([3, 1, 2, 2], "1-3"),
        (range(0, 8), "0-7"),
        ({0, 2, 4}, "0,2,4"),
        ({0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, "0-7,16-23"),
    ],
)
def test_format_cpu_list(cpus, text: str) -> None:
    assert format_cpu_list(cpus) == text


def test_host_cpu_affinity_threads_and_node() -> None:
    host = describe_host()
    models = [
        line.split(":", 1)[1].strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines()
        if line.startswith("model name")
    ]
    if models:
        assert host["cpu_model"] == models[0]
    assert host["cpu_model"]
    allowed = os.sched_getaffinity(0)
    assert host["cpu_affinity"] == format_cpu_list(allowed)
    assert host["cpu_count_allowed"] == len(allowed)
    assert host["torch_threads"] == torch.get_num_threads()
    assert host["node_name"] == (os.environ.get("SLURMD_NODENAME") or os.uname().nodename)
    governor = Path(f"/sys/devices/system/cpu/cpu{min(allowed)}/cpufreq/scaling_governor")
    assert host["cpu_governor"] == (governor.read_text().strip() if governor.exists() else None)


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset")
def test_restricted_affinity_is_reported() -> None:
    host = _host_in_subprocess(prefix=("taskset", "-c", "0"))
    assert host["cpu_affinity"] == "0"
    assert host["cpu_count_allowed"] == 1


def test_slurm_environment_is_recorded() -> None:
    clean = {
        key: ""
        for key in (
            "SLURM_CPU_BIND",
            "SLURM_CPU_BIND_TYPE",
            "SLURM_CPU_BIND_LIST",
            "SLURM_CPUS_PER_TASK",
            "SLURM_JOB_CPUS_PER_NODE",
        )
    }
    host = _host_in_subprocess(
        {**clean, "SLURM_CPU_BIND": "quiet,mask_cpu:0x3", "SLURMD_NODENAME": "gpu-node-17"}
    )
    assert host["slurm_cpu_bind"] == "quiet,mask_cpu:0x3"
    assert host["node_name"] == "gpu-node-17"
    parts = _host_in_subprocess({**clean, "SLURM_CPU_BIND_TYPE": "map_cpu:", "SLURM_CPU_BIND_LIST": "4"})
    assert parts["slurm_cpu_bind"] == "map_cpu:4"
    assert _host_in_subprocess(clean)["slurm_cpu_bind"] is None
    given = {**clean, "SLURM_JOB_CPUS_PER_NODE": "32(x2)"}
    assert _host_in_subprocess(given)["slurm_cpus"] == 32
    assert _host_in_subprocess({**given, "SLURM_CPUS_PER_TASK": "16"})["slurm_cpus"] == 16
    assert _host_in_subprocess(clean)["slurm_cpus"] is None


def test_the_environment_names_runs_that_slurm_did_not_bind(tmp_path: Path) -> None:
    """A run that could use more CPUs than its Slurm job was given shared them with the node's other
    jobs: the report's environment table says how many runs did, and a sweep of bound runs has no such
    line."""
    write_cell(tmp_path, "bound", step_ms=[5.0], cpu_count_allowed=16, slurm_cpus=16)
    write_cell(tmp_path, "free", "inductor", step_ms=[4.0], cpu_count_allowed=32, slurm_cpus=16)
    table = environment_table(open_sweep(tmp_path, warn=None).data.attempts)
    assert "1 of them could run on more CPUs than Slurm gave them" in table.note
    values = dict(zip(table.text["field"], table.text["value"]))
    assert (values["CPUs allowed"], values["CPUs given by Slurm"]) == ("16–32", "16")
    write_cell(tmp_path / "bound_only", "bound", step_ms=[5.0], cpu_count_allowed=16, slurm_cpus=16)
    bound_only = open_sweep(tmp_path / "bound_only", warn=None).data.attempts
    assert "could run on more CPUs" not in environment_table(bound_only).note


@pytest.mark.skipif(torch.cuda.is_available(), reason="for a machine without a GPU")
def test_gpu_state_without_a_gpu_is_all_none_and_asks_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU: no probe is started (neither NVML nor nvidia-smi), so nothing can make it wait."""
    calls = _fake_smi(tmp_path, monkeypatch, "exit 0\n")
    asked: list[str] = []
    monkeypatch.setattr(provenance, "_nvml_state", asked.append)
    assert gpu_state(0) == dict.fromkeys(GPU_KEYS)
    row = start("cuda:0")  # torch sees no GPU here: the GPU columns stay null
    assert all(row[f.name] is None for f in PROVENANCE_FIELDS if f.name.startswith("gpu_"))
    assert asked == [] and not calls.exists()


def _fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """An `nvidia-smi` first on PATH that logs its arguments to calls.txt and runs `body`."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/calls.txt\n{textwrap.dedent(body)}')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "calls.txt"


def test_gpu_state_reads_nvidia_smi_by_bus_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The torch index is 0 but the GPU is the one at bus 0xAB: nvidia-smi must be asked for that one.
    monkeypatch.setattr(provenance, "_gpu_id", lambda index: ("00000000:ab:00.0", 1980))
    monkeypatch.setattr(provenance, "_nvml_state", lambda bus_id: None)  # as without pynvml
    calls = _fake_smi(
        tmp_path,
        monkeypatch,
        f"""
        case "$1" in
          --query-gpu=*) echo "580.159.04, 1755, 2619, [N/A], 700.00, 41" ;;
          *) printf '{os.getpid()}, /usr/bin/python3\\n4242, /opt/other/bin/train\\n' ;;
        esac
    """,
    )
    state = gpu_state(0)
    assert state == {
        "gpu_driver": "580.159.04",
        "gpu_sm_clock_mhz": 1755,
        "gpu_mem_clock_mhz": 2619,
        "gpu_max_sm_clock_mhz": 1980,  # nvidia-smi said [N/A]: torch's value
        "gpu_power_limit_w": 700.0,
        "gpu_temp_c": 41.0,
        "gpu_other_processes": 1,
        "gpu_other_process_list": "4242:train",
    }  # ourselves left out
    assert all(line.split()[-2:] == ["-i", "00000000:ab:00.0"] for line in calls.read_text().splitlines())


def test_a_hanging_nvidia_smi_gives_none_within_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(provenance, "PROBE_TIMEOUT_S", 0.3)
    monkeypatch.setattr(provenance, "_gpu_id", lambda index: ("00000000:ab:00.0", None))
    monkeypatch.setattr(provenance, "_nvml_state", lambda bus_id: None)
    # A probe that never answers: gpu_state returning at all shows that the bound cut it.
    calls = _fake_smi(tmp_path, monkeypatch, f"echo $$ > {tmp_path}/pid\nexec sleep 100000\n")
    assert gpu_state(0) == dict.fromkeys(GPU_KEYS)
    assert len(calls.read_text().splitlines()) == 1  # cut at the first query; the second never asked
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # and the hung nvidia-smi was killed, not left behind
        os.kill(pid, 0)


def test_a_hanging_nvml_gives_none_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(provenance, "PROBE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(provenance, "_gpu_id", lambda index: ("00000000:ab:00.0", None))
    release = threading.Event()  # a probe that hangs until the test is over
    monkeypatch.setattr(provenance, "_nvml_state", lambda bus_id: release.wait())
    try:
        assert gpu_state(0) == dict.fromkeys(GPU_KEYS)
        assert not release.is_set()  # returned while NVML still hung: the bound cut it
    finally:
        release.set()


def test_finish_adds_the_end_temperature_and_keeps_what_its_probe_missed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    states = iter(
        [
            {
                "gpu_driver": "580",
                "gpu_sm_clock_mhz": 345,
                "gpu_mem_clock_mhz": 2619,
                "gpu_max_sm_clock_mhz": 1980,
                "gpu_power_limit_w": 700.0,
                "gpu_temp_c": 30.0,
                "gpu_other_processes": 2,
                "gpu_other_process_list": "1:a,2:b",
            },
            {
                "gpu_driver": None,
                "gpu_sm_clock_mhz": 1755,
                "gpu_mem_clock_mhz": None,
                "gpu_max_sm_clock_mhz": None,
                "gpu_power_limit_w": None,
                "gpu_temp_c": 62.0,
                "gpu_other_processes": 1,
                "gpu_other_process_list": "1:a",
            },
        ]
    )
    monkeypatch.setattr(provenance, "_cuda_index", lambda device: 0)
    monkeypatch.setattr(provenance, "gpu_state", lambda index: dict(next(states)))
    row = finish("cuda", start("cuda"))
    assert (row["gpu_temp_start_c"], row["gpu_temp_end_c"]) == (30.0, 62.0)
    assert (row["gpu_sm_clock_mhz"], row["gpu_mem_clock_mhz"]) == (
        1755,
        2619,
    )  # under load; start's where unread
    assert (row["gpu_driver"], row["gpu_max_sm_clock_mhz"], row["gpu_power_limit_w"]) == ("580", 1980, 700.0)
    assert (row["gpu_other_processes"], row["gpu_other_process_list"]) == (2, "1:a,2:b")  # the most seen
    assert "gpu_temp_c" not in row
