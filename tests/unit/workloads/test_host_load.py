"""workloads/instruments/host_load.py: the host's speed and load while a cell measures, against a neighbour
process whose CPU time we know, hand-made /proc/stat lines, a real CPU cell's run row, and the host
probe of two real sweeps, one on a slowed interpreter, through `compare`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from analysis.cells.loaded import open_sweep
from analysis.reading.environment import environment_table
from orchestrator.cli.main import main
from tests.helpers.analysis_sweeps import write_cell, write_manifest
from workloads.contract.schema import HOST_LOAD_FIELDS
from workloads.instruments.host_load import (
    CpuSample,
    HostLoad,
    op_overhead_us,
    parse_proc_stat,
    sample,
    window,
)

#: A neighbour that, once told to go, spins until it has spent 0.5 s of CPU time (however long a
#: loaded machine makes that take), then says how much it spent.
SPINNER = """
import sys, time
sys.stdin.readline()  # go
start = time.process_time()
while time.process_time() - start < 0.5:
    pass
print(time.process_time() - start, flush=True)
"""


def test_proc_stat_arithmetic() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice, at 100 ticks per second
    before = parse_proc_stat("cpu  100 0 50 800 10 5 5 30 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n", 100)
    after = parse_proc_stat("intr 1\ncpu  400 0 150 1000 10 5 5 130 0 0\n", 100)
    assert before == pytest.approx((1.6, 0.3, 10.0)) and after == pytest.approx((5.6, 1.3, 17.0))
    begin, end = CpuSample(*before, own_s=2.0, wall_s=10.0), CpuSample(*after, own_s=3.0, wall_s=12.0)
    # 4 s of the node's CPU time busy over 2 s, 1 s of it ours: 1.5 CPUs busy with other work;
    # 1 s stolen of the 7 s the node's CPUs had.
    assert window(begin, end) == {
        "node_cpus_busy_other": pytest.approx(1.5),
        "cpu_steal_share": pytest.approx(1 / 7),
    }
    # A kernel without the steal column (before 2.6.11) still parses; no time passed: nothing to say.
    assert parse_proc_stat("cpu 1 2 3 4 5\n", 1) == (6.0, 0.0, 15.0)
    assert parse_proc_stat("intr 5\n", 100) is None
    assert window(end, end) == window(None, end) == {"node_cpus_busy_other": None, "cpu_steal_share": None}


def test_a_busy_neighbour_is_counted() -> None:
    spinner = subprocess.Popen(
        [sys.executable, "-c", SPINNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        begin = sample()
        spinner.stdin.write("go\n")
        spinner.stdin.flush()
        spun_s = float(spinner.stdout.readline())  # the neighbour's CPU time, all of it inside the window
        end = sample()
    finally:
        spinner.kill()
        spinner.wait()
    other = window(begin, end)
    # The node's busy time holds the neighbour's; the clock ticks of 2 CPUs may each round one off.
    assert other["node_cpus_busy_other"] * (end.wall_s - begin.wall_s) >= spun_s - 0.05
    assert 0 <= other["cpu_steal_share"] <= 1


def test_op_overhead_on_the_cpu_and_a_window_never_opened() -> None:
    us = op_overhead_us("cpu")
    assert us is not None and 0 < us < 1000  # an in-place add on one element: microseconds, not milliseconds
    assert op_overhead_us("no-such-device") is None
    assert HostLoad().after_loop() == dict.fromkeys(f.name for f in HOST_LOAD_FIELDS)


def test_a_cpu_cell_records_the_host_while_it_measured(tiny_cells) -> None:
    cell = tiny_cells.get("resnet")
    row = pq.read_table(cell.cell_dir / "run.parquet").to_pylist()[-1]
    assert row["status"] == "completed"
    assert 0 < row["host_op_us"] < 1000 and 0 < row["host_op_us_after"] < 1000  # the probe around the window
    assert row["node_cpus_busy_other"] >= 0 and 0 <= row["cpu_steal_share"] <= 1
    assert row["compile_workers_wait_s"] >= 0 and row["compile_workers_cpus"] == 0  # eager: none


def test_the_environment_shows_the_host_load_and_names_runs_with_steal(tmp_path: Path) -> None:
    write_cell(
        tmp_path, "quiet", step_ms=[5.0], host_op_us=4.5, node_cpus_busy_other=0.25, cpu_steal_share=0.0
    )
    write_cell(
        tmp_path,
        "stolen",
        "inductor",
        step_ms=[4.0],
        host_op_us=7.0,
        node_cpus_busy_other=14.0,
        cpu_steal_share=0.12,
    )
    table = environment_table(open_sweep(tmp_path, warn=None).data.attempts)
    values = dict(zip(table.text["field"], table.text["value"]))
    assert values["host µs per tiny op, before measuring"] == "4.50–7.00"
    assert values["node CPUs busy with other work, while measuring"] == "0.25–14.00"
    assert "1 of them measured while the hypervisor took more than 5% of the node's CPU time" in table.note
    write_cell(tmp_path / "calm", "quiet", step_ms=[5.0], cpu_steal_share=0.01)
    assert "hypervisor" not in environment_table(open_sweep(tmp_path / "calm", warn=None).data.attempts).note


def _every_line(frame, event, arg):  # noqa: ANN001, ANN202 - sys.settrace's signature
    return _every_line


def test_a_slower_host_moves_the_probe_and_compare_sees_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tiny_config
) -> None:
    """Two real one-cell sweeps of eager gpt tiny on the CPU, 2 runs each, B's with every Python line
    traced (sys.settrace: a slower interpreter, as a slower host's is): B's probe no torch touches, before and
    after measuring, is slower beyond its noise (traced, the loop takes several times as long: no load
    moves it that far), and compare shows it. A CPU cell has no device time: its step's verdict stands."""
    from workloads.cell.config_io import cell_config_from_dict
    from workloads.run import run_cell

    config = cell_config_from_dict(tiny_config("gpt", cell_id="e"))
    for sweep, trace in (("a", None), ("b", _every_line)):
        before = sys.gettrace()
        sys.settrace(trace or before)
        try:
            for repeat in range(2):
                assert run_cell(config, tmp_path / sweep / "cells" / "e", repeat=repeat) == "completed"
        finally:
            sys.settrace(before)
        write_manifest(tmp_path / sweep, [{"cell_id": "e"}])
    for sweep in "ab":
        row = pq.read_table(tmp_path / sweep / "cells" / "e" / "run.parquet").to_pylist()[-1]
        assert row["host_py_us"] > 0 and row["host_py_us_after"] > 0 and row["host_op_us_after"] > 0
    capsys.readouterr()  # the cells' own lines
    code = main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--format", "json"])
    (cell,) = json.loads(capsys.readouterr().out)["cells"]
    print(
        f"probe B/A {cell['probe_ratio']:.2f} [{cell['probe_ratio_low']:.2f}, {cell['probe_ratio_high']:.2f}]"
    )
    assert cell["probe_interval"] == "across 2+2 runs" and cell["probe_ratio_low"] > 1
    assert cell["gpu_ratio"] is None and cell["verdict"] == cell["step_verdict"]
    assert code == int(cell["verdict"] == "regression")
