"""`compilebench compare` on cells with device time: a host change told from a code change (issues 39
and 50). The issue-39 cell: gpt small inductor, 3 runs on each of two H100 hosts, wall step 11.57 ->
8.41 ms, GPU time 5.588 -> 5.581 ms. Each run's host probe before and after measuring carries this
machine's own noise (PROBE_SD_PROCESS, PROBE_SD_WINDOW)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from tests.helpers.analysis_sweeps import (
    H100,
    write_cell,
    write_manifest,
    write_paired_replicates,
    write_replicates,
)
from tests.helpers.compare_sweeps import run, steps, write_sweep

GPT_SMALL = dict(model="gpt", size="small", **H100)
#: Launches per step of the cells below.
LAUNCHES = 800.0
#: The host probe's noise on the project's 2-core CPU machine, 3 other jobs beside it
#: (`examples/benchmarks/host_probe_noise.py 12`, 2026-12-07, `python_op_us`): the sd of the log of a
#: process's probe between processes, and of after / before measuring within one.
PROBE_SD_PROCESS, PROBE_SD_WINDOW = 0.056, 0.101
_draws = np.random.default_rng(50)
#: Each run's offsets of the log probe: its process's, and its window's (after against before).
PROBE_NOISE = list(zip(_draws.normal(0, PROBE_SD_PROCESS, 3), _draws.normal(0, PROBE_SD_WINDOW, 3)))
XEON = "Intel(R) Xeon(R) Platinum 8468"


def probe_text(a_us: float, b_us: float, runs: int = 3) -> str:
    """'probe 10.6 → 8.1 µs': two sides' probes as compare shows them, the geometric mean over their
    runs' noise (the windows' offsets cancel in each run's geometric mean of before and after)."""
    centre = np.exp(np.mean([process for process, _ in PROBE_NOISE[:runs]]))
    return f"probe {a_us * centre:.1f} → {b_us * centre:.1f} µs"


def device_run(
    gpu_ms: float, host_ms: float | None, probe_us: float, repeat: int = 0, launches: float = LAUNCHES, **run
) -> dict:
    """A run row's device columns: GPU time per step over 3 profiled windows 0.05% apart, launches and
    the host's ms per step (none where `host_ms` is None: before they were counted), and the host probe
    before and after measuring at `probe_us` with run `repeat`'s noise."""
    windows = [gpu_ms * (1 + d) for d in (-0.0005, 0.0, 0.0005)]
    host = {} if host_ms is None else {"launches_per_step": launches, "host_ms_per_step": host_ms}
    process, window = PROBE_NOISE[repeat]
    probe = {
        "host_py_us": probe_us * np.exp(process - window / 2),
        "host_py_us_after": probe_us * np.exp(process + window / 2),
    }
    return {"gpu_ms_per_step": gpu_ms, "gpu_ms_windows": windows, **host, **probe, **run}


def write_device_cell(
    root: Path,
    step_ms: float,
    gpu_ms: float,
    probe_us: float,
    runs: int = 3,
    launches: float = LAUNCHES,
    counted: bool = True,
    **run,
) -> Path:
    """A launch-bound inductor cell of gpt small on an H100 (its host's ms per step its step) run `runs`
    times, its runs' steps and GPU times 0.3% apart, each run's row with `device_run`'s columns (no
    launches where not `counted`) and `run`."""
    spread = (1.0, 1.003, 0.997)[:runs]
    rows = [
        device_run(gpu_ms * s, step_ms * s if counted else None, probe_us, r, launches, **run)
        for r, s in enumerate(spread)
    ]
    write_replicates(
        root, "i", "inductor", [steps(step_ms * s, seed) for seed, s in enumerate(spread)],
        replicate_run=rows, **GPT_SMALL,
    )  # fmt: skip
    write_manifest(root, [{"cell_id": "i"}])
    return root


def compared(capsys: pytest.CaptureFixture[str], a: Path, b: Path) -> tuple[int, dict, str]:
    """(exit code, the one compared cell's JSON record, the Markdown)."""
    code, out, _ = run(capsys, a, b, "--format", "json")
    (cell,) = json.loads(out)["cells"]
    markdown_code, markdown, _ = run(capsys, a, b)
    assert markdown_code == code
    return code, cell, markdown


def welch(top: list[float], bottom: list[float]) -> tuple[float, float]:
    """Welch's 95% interval of exp(mean log top - mean log bottom), by hand."""
    logs = [np.log(values) for values in (top, bottom)]
    vt, vb = (v.var(ddof=1) / len(v) for v in logs)
    df = (vt + vb) ** 2 / (vt**2 / (len(logs[0]) - 1) + vb**2 / (len(logs[1]) - 1))
    centre, half = logs[0].mean() - logs[1].mean(), float(stats.t.ppf(0.975, df)) * np.sqrt(vt + vb)
    return float(np.exp(centre - half)), float(np.exp(centre + half))


def test_a_faster_host_is_a_host_change_not_an_improvement(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The step 27% faster on B, the GPU time the same to 0.13%, the host probe 10.5 -> 8.0 µs on
    another node: the model predicts 0.762x, the step 0.727x, 4.7% apart: a host change, counted as
    neither improvement nor regression, both ways round; the hosts named."""
    a = write_device_cell(tmp_path / "a", 11.57, 5.588, 10.5, node_name="gpu-a", cpu_model=XEON)
    b = write_device_cell(tmp_path / "b", 8.41, 5.581, 8.0, node_name="gpu-b", cpu_model=XEON)
    code, cell, markdown = compared(capsys, a, b)
    assert code == 0 and (cell["step_verdict"], cell["verdict"]) == ("improvement", "host change")
    assert cell["gpu_verdict"] == "within threshold" and cell["gpu_interval"] == "across 3+3 runs"
    spread = [1.0, 1.003, 0.997]
    low, high = welch([5.581 * s for s in spread], [5.588 * s for s in spread])
    assert (cell["gpu_ratio_low"], cell["gpu_ratio_high"]) == (pytest.approx(low), pytest.approx(high))
    per_run = [np.exp(process) for process, _ in PROBE_NOISE]  # each run's geometric mean of its two
    low, high = welch([8.0 * p for p in per_run], [10.5 * p for p in per_run])
    assert cell["probe_ratio"] == pytest.approx(8.0 / 10.5) and cell["probe_interval"] == "across 3+3 runs"
    assert (cell["probe_ratio_low"], cell["probe_ratio_high"]) == (pytest.approx(low), pytest.approx(high))
    assert high < 1 and cell["predicted_step_ratio"] == pytest.approx(8.0 / 10.5)
    assert (cell["a_hosts"], cell["b_hosts"]) == (f"gpu-a ({XEON})", f"gpu-b ({XEON})")
    note = f"{probe_text(10.5, 8.0)}, model 0.762x; {11.57 / 0.8:.1f} → {8.41 / 0.8:.1f} µs/launch"
    assert f"| host change: {note}; GPU time 5.59 → 5.58 ms |" in markdown
    assert f"Hosts differ: A ran on gpu-a ({XEON}); B on gpu-b ({XEON})." in markdown
    assert markdown.rstrip().endswith("1 cell(s) compared, 1 host change(s), 0 regression(s)")
    code, cell, markdown = compared(capsys, b, a)  # a slower host: no regression, exit 0
    assert code == 0 and (cell["step_verdict"], cell["verdict"]) == ("regression", "host change")
    result = json.loads(run(capsys, b, a, "--format", "json")[1])
    assert (result["regressions"], result["host_changes"]) == (0, 1)


@pytest.mark.parametrize(
    "b_step_ms, b_gpu_ms, b_launches, b_probe_us",
    [
        (8.4 + 2.5, 5.588, LAUNCHES, 10.5),  # 2.5 ms more host work a step, GPU time and launches held
        (8.4 * 1.25, 5.588, LAUNCHES, 10.5 * 1.001),  # 25% slower, the host probe 0.1% slower
        (8.4 * 1.30, 5.588 * 1.04, LAUNCHES * 1.04, 10.5),  # launches +4%, GPU time +4%, step +30%
    ],
    ids=["host-work", "probe-0.1%", "launches-gpu-4%"],
)
def test_code_regressions_on_one_host_are_regressions(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    b_step_ms: float,
    b_gpu_ms: float,
    b_launches: float,
    b_probe_us: float,
) -> None:
    """Issue 50's three code regressions of a launch-bound cell (step 8.4 ms, GPU 5.588 ms) on one
    host, whose µs per launch, taken from the steps themselves, rose with the step: the probe holds
    within its noise, so each is a regression and compare exits 1."""
    a = write_device_cell(tmp_path / "a", 8.4, 5.588, 10.5, node_name="gpu-a", cpu_model=XEON)
    b = write_device_cell(
        tmp_path / "b",
        b_step_ms,
        b_gpu_ms,
        b_probe_us,
        launches=b_launches,
        node_name="gpu-a",
        cpu_model=XEON,
    )
    code, cell, markdown = compared(capsys, a, b)
    assert (code, cell["step_verdict"], cell["verdict"]) == (1, "regression", "regression")
    assert cell["gpu_verdict"] == "within threshold" and cell["b_us_per_launch"] > cell["a_us_per_launch"]
    assert cell["probe_ratio_low"] < 1 < cell["probe_ratio_high"]  # the same host, within its noise
    assert f"Hosts: A and B ran on the same: gpu-a ({XEON})." in markdown


def test_a_code_regression_on_a_slower_host_is_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The step 30% slower on a host whose probe is 15% slower, beyond its noise: the host explains
    1.15x of it, the code the rest (13%, beyond the model's 10%): a regression, exit 1."""
    a = write_device_cell(tmp_path / "a", 8.4, 5.588, 10.5)
    b = write_device_cell(tmp_path / "b", 8.4 * 1.30, 5.588, 10.5 * 1.15)
    code, cell, markdown = compared(capsys, a, b)
    assert (code, cell["verdict"]) == (1, "regression") and cell["probe_ratio_low"] > 1
    assert cell["predicted_step_ratio"] == pytest.approx(1.15)
    assert f"| regression: {probe_text(10.5, 10.5 * 1.15)}, model 1.150x;" in markdown


def test_a_paired_cell_is_read_on_its_own_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A paired cell's step and GPU time are its compiled side's (its own steps); its eager side's GPU
    time, here twice as long in B, is not what compare weighs: still a host change."""
    for root, compiled_ms, gpu_ms, probe_us, eager_gpu_ms in (
        ("a", 11.57, 5.588, 10.5, 7.456),
        ("b", 8.41, 5.581, 8.0, 15.0),
    ):
        blocks = [
            [(steps(15.0, 10 * r + p, 5), steps(compiled_ms, 5 + 10 * r + p, 5)) for p in range(4)]
            for r in range(3)
        ]  # 3 runs of 4 pairs of 5-step blocks
        rows = [
            device_run(gpu_ms, compiled_ms, probe_us, r, eager_gpu_ms_per_step=eager_gpu_ms) for r in range(3)
        ]
        write_paired_replicates(tmp_path / root, "i", "inductor", blocks, replicate_run=rows, **GPT_SMALL)
    code, cell, markdown = compared(capsys, tmp_path / "a", tmp_path / "b")
    assert (code, cell["verdict"], cell["gpu_interval"]) == (0, "host change", "across 3+3 runs")
    assert cell["gpu_ratio"] == pytest.approx(5.581 / 5.588)
    # The per-backend speedups carry the device-time speedup of each sweep: its eager side's GPU time
    # over its compiled side's.
    (speedups,) = json.loads(run(capsys, tmp_path / "a", tmp_path / "b", "--format", "json")[1])["speedups"]
    assert speedups["a_geomean_device_speedup"] == pytest.approx(7.456 / 5.588)
    assert speedups["b_geomean_device_speedup"] == pytest.approx(15.0 / 5.581)
    assert f"| {7.456 / 5.588:.3f}x → {15.0 / 5.581:.3f}x |" in markdown


def test_less_gpu_time_is_an_improvement_whatever_the_host(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A code change: the GPU time 5.6 -> 4.0 ms (beyond the threshold) on a host that also got faster:
    the device time decides, an improvement."""
    a = write_device_cell(tmp_path / "a", 8.0, 5.6, 10.5)
    b = write_device_cell(tmp_path / "b", 6.0, 4.0, 9.6)
    code, cell, markdown = compared(capsys, a, b)
    assert code == 0 and (cell["verdict"], cell["gpu_verdict"]) == ("improvement", "improvement")
    assert cell["gpu_ratio_high"] < 0.95
    note = f"{probe_text(10.5, 9.6)}, model 0.914x; 10.0 → 7.5 µs/launch; GPU time 5.60 → 4.00 ms"
    assert f"| improvement: {note} |" in markdown
    assert markdown.rstrip().endswith("1 cell(s) compared, 0 regression(s)")


def test_more_gpu_time_under_a_faster_host_is_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A GPU-bound cell whose GPU time grew 5.6 -> 6.5 ms while B's host is faster (probe 10.5 -> 9.0
    µs): the step regressed, the GPU's work with it: a regression, exit 1."""
    a = write_device_cell(tmp_path / "a", 6.0, 5.6, 10.5)
    b = write_device_cell(tmp_path / "b", 6.9, 6.5, 9.0)
    code, cell, markdown = compared(capsys, a, b)
    assert code == 1 and (cell["verdict"], cell["gpu_verdict"]) == ("regression", "regression")
    assert f"| regression: {probe_text(10.5, 9.0)}" in markdown and "GPU time 5.60 → 6.50 ms |" in markdown
    assert markdown.rstrip().endswith("1 regression(s): gpt small · inductor 1.150x")


def test_fewer_launches_are_a_code_change(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same GPU time, the step faster, the probe faster too, but 800 -> 100 launches per step (CUDA
    graphs): the code changed, not the host: an improvement."""
    a = write_device_cell(tmp_path / "a", 11.57, 5.588, 10.5)
    b = write_device_cell(tmp_path / "b", 8.41, 5.581, 8.0, launches=100.0)
    code, cell, _ = compared(capsys, a, b)
    assert (code, cell["verdict"], cell["gpu_verdict"]) == (0, "improvement", "within threshold")
    assert cell["b_launches_per_step"] == 100.0


def test_one_run_a_side_has_its_sweeps_spread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One run on each side: the GPU time's interval is Welch's over the two runs' profiled windows
    (`within one process`; equivalence within the threshold, not an interval that holds 1: this one
    lies below 1, -0.13%, the windows 0.05% apart). The probe of one run has no spread of its own: a
    sweep of one run gives none, and the step's improvement stands; in sweeps of three such cells, each
    its own process, each cell's run is one draw from its sweep's runs (Welch's with their spread) and
    the hosts differ: host changes."""
    a = write_device_cell(tmp_path / "a", 11.57, 5.588, 10.5, runs=1)
    b = write_device_cell(tmp_path / "b", 8.41, 5.581, 8.0, runs=1)
    code, cell, _ = compared(capsys, a, b)
    assert cell["gpu_interval"] == cell["interval"] == "within one process"
    low, high = welch(
        device_run(5.581, None, 1)["gpu_ms_windows"], device_run(5.588, None, 1)["gpu_ms_windows"]
    )
    assert (cell["gpu_ratio_low"], cell["gpu_ratio_high"]) == (pytest.approx(low), pytest.approx(high))
    assert cell["gpu_ratio_high"] < 1 and cell["probe_ratio_low"] is None
    assert (code, cell["verdict"]) == (0, "improvement")
    for root, step_ms, gpu_ms, probe_us in (("a3", 11.57, 5.588, 10.5), ("b3", 8.41, 5.581, 8.0)):
        for seed in range(3):  # cell `seed`'s one run drew run `seed`'s noise
            write_replicates(
                tmp_path / root, f"i{seed}", "inductor", [steps(step_ms, seed)],
                replicate_run=[device_run(gpu_ms, step_ms, probe_us, seed)], **{**GPT_SMALL, "seed": seed},
            )  # fmt: skip
        write_manifest(tmp_path / root, [{"cell_id": f"i{seed}"} for seed in range(3)])
    code, out, _ = run(capsys, tmp_path / "a3", tmp_path / "b3", "--format", "json")
    cells = json.loads(out)["cells"]
    process = np.array([p for p, _ in PROBE_NOISE])  # each run's log offset; the sweeps' spread is theirs
    half = stats.t.ppf(0.975, 4) * np.sqrt(2) * process.std(ddof=1)  # Welch: equal spreads, 2 + 2 df
    for cell in cells:
        assert cell["probe_interval"] == "one run: the sweep's spread" and cell["verdict"] == "host change"
        assert cell["probe_ratio"] == pytest.approx(8.0 / 10.5)
        assert cell["probe_ratio_low"] == pytest.approx(8.0 / 10.5 * np.exp(-half))
        assert cell["probe_ratio_high"] == pytest.approx(8.0 / 10.5 * np.exp(half))
        assert cell["probe_ratio_high"] < 1
    assert code == 0 and len(cells) == 3


def test_a_slower_torch_dispatcher_is_a_regression(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A new torch whose every eager op costs 25% more host time on the same host: the tiny torch op
    (`host_op_us`) moves with the step, the probe no torch touches does not: a regression, exit 1."""
    a = write_device_cell(tmp_path / "a", 8.4, 5.588, 10.5, host_op_us=6.0)
    b = write_device_cell(tmp_path / "b", 8.4 * 1.25, 5.588, 10.5, host_op_us=6.0 * 1.25)
    code, cell, _ = compared(capsys, a, b)
    assert (code, cell["verdict"]) == (1, "regression") and cell["probe_ratio"] == pytest.approx(1.0)


def test_an_older_sweep_has_no_probe_and_keeps_the_step_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sweep from before issue 50 and before launches were counted: each run's host_op_us alone (a
    torch op, which a new torch moves too), no probe apart from torch: the step's verdict stands,
    said with what it rests on."""
    for root, step_ms, gpu_ms, op_us in (("a", 11.57, 5.588, 10.5), ("b", 8.41, 5.581, 8.0)):
        rows = [
            {
                **device_run(gpu_ms, None, 1.0, r),
                "host_py_us": None,
                "host_py_us_after": None,
                "host_op_us": op_us,
            }
            for r in range(3)
        ]
        write_replicates(tmp_path / root, "i", "inductor", [steps(step_ms, r) for r in range(3)],
                         replicate_run=rows, **GPT_SMALL)  # fmt: skip
    code, cell, markdown = compared(capsys, tmp_path / "a", tmp_path / "b")
    assert (code, cell["verdict"], cell["probe_ratio"], cell["a_us_per_launch"]) == (
        0,
        "improvement",
        None,
        None,
    )
    assert "| improvement: GPU time 5.59 → 5.58 ms |" in markdown


def test_cells_without_device_time_keep_the_step_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CPU sweep: no GPU columns, the step decides and says so. Beside a cell with device time, a cell
    without it on one side reads `no device time`, and its moved step keeps its verdict."""
    a, b = write_sweep(tmp_path / "a", 8.0), write_sweep(tmp_path / "b", 6.0)
    markdown = run(capsys, a, b)[1]
    assert "GPU" not in markdown.split("\n\n")[1] and "| improvement: no device time |" in markdown
    assert "No device time in these cells" in markdown
    a = write_device_cell(tmp_path / "ga", 8.0, 5.6, 10.5)
    b = write_device_cell(tmp_path / "gb", 6.0, 5.6, 7.9)
    write_cell(a, "c", "inductor", step_ms=steps(8.0, 5), **{**GPT_SMALL, "seed": 1})
    write_cell(b, "c", "inductor", step_ms=steps(6.0, 5), **{**GPT_SMALL, "seed": 1}, gpu_ms_per_step=5.6)
    code, out, _ = run(capsys, a, b, "--format", "json")
    cells = {cell["a_cell_id"]: cell for cell in json.loads(out)["cells"]}
    assert code == 0 and cells["i"]["verdict"] == "host change"
    assert (cells["c"]["verdict"], cells["c"]["verdict_note"], cells["c"]["gpu_ratio"]) == (
        "improvement", "no device time", None,
    )  # fmt: skip
    (row,) = [line for line in run(capsys, a, b)[1].splitlines() if line.startswith("| gpt small seed 1 ")]
    assert [part.strip() for part in row.split("|")][-4:-1] == [
        "no device time",
        "",
        "improvement: no device time",
    ]
