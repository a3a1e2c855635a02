"""The GEMM cell's timing modes (`gemm.timing`: sustained, burst; workloads/gemm/bursts.py) and the GPU
clocks every GEMM cell records (workloads/instruments/gpu_clocks.py): the config's refusals and cell
ids, a burst cell run for real on the CPU (its clocks not measured there), the clocks' bookkeeping on
a stand-in NVML where a GPU is unavoidable, and the GEMM table's columns for new and old sweeps. The GPU
tier runs a cell of each mode on a GPU (tests/gpu/test_gpu_tier.py) and compares them with a direct timing
(examples/benchmarks/gemm_timing_modes.py)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch

from analysis.report import analyze
from analysis.studies.gemm.figure import gemm_figure
from tests.helpers import cli, gemm_config
from tests.helpers.analysis_sweeps import write_gemm_cell
from workloads.cell.catalog import check_cell
from workloads.cell.cell_id import config_digest
from workloads.cell.config import ConfigError
from workloads.cell.config_io import cell_config_from_dict, cell_config_to_dict
from workloads.contract.vocabulary import BURST, COMPLETED, SUSTAINED, axes_from_config
from workloads.gemm.bursts import BURST_PAUSE_S
from workloads.instruments import gpu_clocks, nvml
from workloads.instruments.gpu_clocks import clock_columns, limit_names
from workloads.instruments.nvml import ClockReader
from workloads.run import run_cell


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"gemm": {"timing": "fast"}}, "gemm.timing must be one of ('sustained', 'burst')"),
        ({"model": {"name": "gpt"}, "gemm": {"timing": "burst"}}, "gemm.timing=burst: the gemm section"),
    ],
)
def test_timing_refusals_are_one_line(values: dict, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_cell(cell_config_from_dict(gemm_config(**values)))
    assert says in str(info.value) and "\n" not in str(info.value)


def test_a_bad_timing_is_refused_before_submission(tmp_path: Path) -> None:
    shown = cli(tmp_path, "sweep", "model=gemm", "gemm.timing=idle", "device=cpu", "--dry-run",
                f"hydra.sweep.dir={tmp_path / 'sw'}")  # fmt: skip
    assert shown.returncode == 2, shown.stdout
    assert "gemm.timing must be one of ('sustained', 'burst'), got 'idle'" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1 and not (tmp_path / "sw").exists()


def test_both_timings_are_two_cells_of_a_sweep(tmp_path: Path) -> None:
    shown = cli(tmp_path, "sweep", "model=gemm", "gemm.timing=sustained,burst", "device=cpu", "--dry-run",
                f"hydra.sweep.dir={tmp_path / 'sw'}")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    rows = [line for line in shown.stdout.splitlines() if "| gemm " in line]
    assert (
        len(rows) == 2 and rows[0].rstrip(" |").endswith(SUSTAINED) and rows[1].rstrip(" |").endswith(BURST)
    )


def test_the_timing_keeps_default_cell_ids_and_is_a_gemm_axis() -> None:
    sustained = cell_config_from_dict(gemm_config())
    older = cell_config_to_dict(sustained)  # as written before model.timing existed:
    older["model"].update(older.pop("gemm"))  # the gemm section's keys in model
    del older["model"]["timing"]
    assert config_digest(older) == config_digest(sustained)
    burst = cell_config_from_dict(gemm_config(gemm={"timing": BURST}))
    assert config_digest(burst) != config_digest(sustained)
    assert axes_from_config(cell_config_to_dict(burst))["gemm_timing"] == BURST
    assert axes_from_config(older)["gemm_timing"] == SUSTAINED
    assert axes_from_config(cell_config_to_dict(cell_config_from_dict({})))["gemm_timing"] is None  # gpt


def read_cell(directory: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    (run,) = pq.read_table(directory / "run.parquet").to_pylist()
    steps = sorted(pq.read_table(directory / "steps.parquet").to_pylist(), key=lambda s: s["step"])
    return run, steps


def test_a_burst_cell_times_its_gemm_on_the_cpu(tmp_path: Path) -> None:
    """`steps` bursts, each after its idle pause: one measured row per burst, whose median is the
    cell's; the clocks not measured on the CPU (null), and no energy (a burst's window is its pauses)."""
    cfg = cell_config_from_dict(gemm_config(gemm={"timing": BURST}))
    assert run_cell(cfg, tmp_path) == COMPLETED
    run, steps = read_cell(tmp_path)
    assert run["gemm_timing"] == BURST and run["stop_reason"] == "steps"
    assert [s["phase"] for s in steps] == ["warmup"] * 2 + ["measure"] * 5
    measured = [s["step_time_ms"] for s in steps if s["phase"] == "measure"]
    assert all(ms > 0 for ms in measured) and run["median_step_ms"] == pytest.approx(
        statistics.median(measured)
    )
    assert run["gemm_us"] == pytest.approx(run["median_step_ms"] * 1e3)
    assert (run["finished_at"] - run["started_at"]).total_seconds() >= 5 * BURST_PAUSE_S
    assert run["sm_clock_mhz"] is None and run["clock_samples"] is None and run["clock_limits"] is None
    assert run["energy_j"] is None


def test_clock_limits_are_named_in_bit_order_and_or_ed_over_the_samples() -> None:
    assert limit_names(0) == "none"
    assert limit_names(0x20 | 0x4) == "sw_power_cap,sw_thermal"
    assert limit_names(0x80 | 0x800) == "hw_power_brake,0x800"  # a bit newer than the table: its value
    columns = clock_columns([1980, 1755, 1755], [0x0, 0x4, 0x40])
    assert columns == {"sm_clock_mhz": pytest.approx(1830.0), "clock_samples": 3,
                       "clock_limits": "sw_power_cap,hw_thermal"}  # fmt: skip
    assert clock_columns([], []) == dict.fromkeys(("sm_clock_mhz", "clock_samples", "clock_limits"))


@pytest.mark.parametrize("reasons", ["nvmlDeviceGetCurrentClocksEventReasons",
                                     "nvmlDeviceGetCurrentClocksThrottleReasons"])  # fmt: skip
def test_the_clock_reader_reads_nvml_under_either_name(monkeypatch: pytest.MonkeyPatch, reasons: str) -> None:
    """NVML 12.2 renamed the throttle reasons to clocks event reasons: an older nvidia-ml-py has only
    the first name. The board is found by torch's UUID, as the energy counter's; NVML's start is matched."""
    calls: list[Any] = []
    fake = SimpleNamespace(
        NVML_CLOCK_SM=1,
        nvmlDeviceGetHandleByUUID=lambda uuid: f"handle of {uuid}",
        nvmlDeviceGetClockInfo=lambda handle, clock: calls.append((handle, clock)) or 1755,
        nvmlShutdown=lambda: calls.append("stop"),
        **{reasons: lambda handle: 0x4},
    )
    monkeypatch.setattr(nvml, "start", lambda: fake)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(uuid="1b2c"))
    reader = ClockReader.open(torch.device("cuda", 0))
    assert reader is not None and reader.read() == (1755, 0x4)
    reader.close()
    assert calls == [("handle of GPU-1b2c", 1), "stop"]
    assert ClockReader.open(torch.device("cpu")) is None


class StandInClocks:
    """A GPU's clocks for a CPU cell (`ClockReader` is NVML's; a GPU is the only other way): each read
    the next of READINGS, the reads counted."""

    READINGS = [(1980, 0x0), (1755, 0x4), (1700, 0x4 | 0x20)]

    def __init__(self) -> None:
        self.reads: list[tuple[int, int]] = []
        self.closed = False

    @classmethod
    def open(cls, device: torch.device) -> StandInClocks:
        cls.last = cls()
        return cls.last

    def read(self) -> tuple[int, int]:
        self.reads.append(self.READINGS[len(self.reads) % len(self.READINGS)])
        return self.reads[-1]

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(("timing", "samples"), [(SUSTAINED, 1 + 5), (BURST, 5)])
def test_the_clocks_are_sampled_in_the_measured_window_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, timing: str, samples: int
) -> None:
    """A real CPU cell on stand-in clocks, every sample let through (no least gap): sustained samples
    after each replay from the last warm-up step on (the measured window), burst once per burst; none
    in the warm-up before it. The columns are the samples' mean and every reason any of them had."""
    monkeypatch.setattr(gpu_clocks, "ClockReader", StandInClocks)
    monkeypatch.setattr(gpu_clocks, "CLOCK_SAMPLE_GAP_S", 0.0)
    cfg = cell_config_from_dict(gemm_config(gemm={"timing": timing}))
    assert run_cell(cfg, tmp_path) == COMPLETED
    run, _ = read_cell(tmp_path)
    board = StandInClocks.last
    assert len(board.reads) == samples == run["clock_samples"] and board.closed
    assert run["sm_clock_mhz"] == pytest.approx(statistics.fmean(mhz for mhz, _ in board.reads))
    assert run["clock_limits"] == "sw_power_cap,sw_thermal"


def test_the_gemm_table_shows_timing_and_clocks_and_old_sweeps_read_as_sustained(tmp_path: Path) -> None:
    """Rows written before the timing modes (no gemm_timing, no clocks) read as sustained with their
    clocks not measured; a burst cell is compared with the cuBLAS cell of its own timing only."""
    write_gemm_cell(tmp_path, "bf16", "eager", "bf16", 256, [59.2, 59.3, 59.4])  # an older sweep's rows
    write_gemm_cell(tmp_path, "fp8", "eager", "fp8", 256, [34.4, 34.5, 34.6], recipe="tensorwise")
    clocks = {"sm_clock_mhz": 1980.0, "clock_samples": 20, "clock_limits": "none"}
    write_gemm_cell(tmp_path, "fp8-burst", "eager", "fp8", 256, [30.8, 30.9, 31.0], recipe="tensorwise",
                    gemm_timing=BURST, **clocks)  # fmt: skip
    result = analyze(tmp_path, warn=None)
    rows = result.gemm.set_index("cell_id")
    assert rows["gemm_timing"].to_dict() == {"fp8-burst": BURST, "bf16": SUSTAINED, "fp8": SUSTAINED}
    assert rows.loc["fp8", "vs_bf16_cublas"] == pytest.approx(59.3 / 34.5)
    assert rows.loc["fp8-burst", "vs_fp8_cublas"] == 1.0 and math.isnan(
        rows.loc["fp8-burst", "vs_bf16_cublas"]
    )
    text = next(t for t in result.tables if t.name == "gemm").text.set_index("cell")
    assert text["timing"].to_dict() == {"fp8-burst": BURST, "bf16": SUSTAINED, "fp8": SUSTAINED}
    assert text.loc["fp8", "SM MHz"] == "not measured" and text.loc["fp8", "clock limits"] == "not measured"
    assert text.loc["fp8-burst", "SM MHz"] == "1980" and text.loc["fp8-burst", "clock limits"] == "none"
    figure = gemm_figure(result.gemm)  # both timings in one panel: a line each, named by its mode
    labels = {text.get_text() for text in figure.axes[0].get_legend().get_texts()}
    assert {
        "fp8 tensorwise cuBLAS, burst",
        "fp8 tensorwise cuBLAS, sustained",
        "bf16 cuBLAS, sustained",
    } <= labels
