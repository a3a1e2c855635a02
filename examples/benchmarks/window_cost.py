"""Where do the profiled windows' seconds go (docs/measurement.md "Device time and the host")?

    PYTHONPATH=. python examples/benchmarks/window_cost.py [--cases gpt:small:inductor ...] [--repeats 3]

Per case, one prepared bf16 cell on the GPU, compiled and warmed up, then `repeats` times each: the
profiled windows of both sides as a cell runs them (workloads/instruments/profiled_window.py), and the
same profiled run taken apart into its stages (the profiler's start, the steps, its stop, the Chrome
trace's export and reading, the windows' arithmetic: read with the garbage collector paused, as a cell
reads them since 50dbd48), in one process, both sides warmed up first; the first repeat's stages are
the process's first profiler, as in a cell. Then the windows at smaller WINDOW_S: their steps, cost and
the spread of the GPU time per step over the windows (max / min - 1).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import run_steps
from workloads.instruments import profiled_window as pw
from workloads.instruments.device_activity import device_activity, windows_activity
from workloads.train_cell import prepare_cell


def stages(step, device, steps: int, sides) -> dict[str, float]:
    """Seconds of each stage of one profiled run of both sides' windows, read as a cell reads them
    (the garbage collector paused)."""
    run = pw.windows_run(step, device, steps, pw.WINDOWS, sides)
    times, t = {}, time.perf_counter()

    def lap(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        times[name], t = now - t, now

    profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
    profiler.__enter__()
    lap("start")
    run()
    torch.cuda.synchronize(device)
    lap("steps")
    profiler.__exit__(None, None, None)
    lap("stop")
    kineto_events(profiler)
    lap("kineto_events")
    with tempfile.TemporaryDirectory() as directory, pw.collector_paused():
        path = Path(directory, "trace.json")
        profiler.export_chrome_trace(str(path))
        lap("export")
        trace = json.loads(path.read_text())
        lap("read")
        windows = windows_activity(device_activity(trace))
        lap("windows")
    times["events"] = float(len(trace.get("traceEvents", [])))
    times["device"] = float(sum(w.kernels for w in windows or []))
    return times


def kineto_events(profiler) -> None:
    """The device's events read from kineto's results without a Chrome trace (torch's private
    `_KinetoEvent`): printed once, the first marker-sized copy and a kernel, to see what they carry."""
    seen = set()
    for event in profiler.profiler.kineto_results.events():
        if event.device_type() != torch.autograd.DeviceType.CUDA:
            continue
        fields = (event.name(), event.start_ns(), event.duration_ns(), event.correlation_id())
        kind = "copy" if "Memcpy" in fields[0] else "kernel"
        if kind not in seen and not getattr(kineto_events, "printed", False):
            seen.add(kind)
            extra = {m: _call(event, m) for m in ("activity_type", "nbytes", "device_resource_id")}
            print(f"  kineto {kind}: {fields} {extra}")
    kineto_events.printed = True


def _call(event, method: str) -> object:
    try:
        return getattr(event, method)()
    except Exception as error:  # noqa: BLE001 - a probe of what this torch has
        return type(error).__name__


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["gpt:small:inductor", "gpt:small:cudagraphs"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window-s", nargs="+", type=float, default=[0.2, 0.1, 0.05])
    args = parser.parse_args()
    for case in args.cases:
        model, size, backend = case.split(":")
        cfg = cell_config_from_dict(
            {
                "model": {"name": model},
                "size": size,
                "backend": {"name": backend},
                "precision": {"name": "bf16"},
                "device": "cuda",
            }  # fmt: skip
        )
        cell = prepare_cell(cfg, CellRecorder("window_cost", 1))
        records: list = []
        run_steps(cell.step, 10, 30, cell.device, records.append)
        median = statistics.median(rec.step_time_ms for rec in records[10:])
        sides = [contextlib.nullcontext, lambda: torch.compiler.set_stance("force_eager")]
        steps = pw.window_steps(median)
        print(f"## {case}: median step {median:.2f} ms, {steps} steps a window")
        for stance in sides:  # both sides warm, as in a paired cell, before the first profiler
            with stance():
                run_steps(cell.step, 0, 5, cell.device, lambda _: None)
        for repeat in range(args.repeats):
            parts = stages(cell.step, cell.device, steps, sides)
            t0 = time.perf_counter()
            windows = pw.profiled_windows(cell.step, cell.device, steps, pw.WINDOWS, sides)
            whole = time.perf_counter() - t0
            text = ", ".join(f"{k} {v:.3f}" if k not in ("events", "device") else f"{k} {v:.0f}"
                             for k, v in parts.items())  # fmt: skip
            print(f"repeat {repeat}: profiled_windows {whole:.3f} s ({len(windows or [])} windows); {text}")
        default = pw.WINDOW_S
        for window_s in args.window_s:
            pw.WINDOW_S = window_s
            steps = pw.window_steps(median)
            t0 = time.perf_counter()
            windows = pw.profiled_windows(cell.step, cell.device, steps, pw.WINDOWS, sides) or []
            whole = time.perf_counter() - t0
            for name, side in (("compiled", windows[: pw.WINDOWS]), ("eager", windows[pw.WINDOWS :])):
                gpu = [w.gpu_ms for w in side]
                print(
                    f"WINDOW_S {window_s}: {steps} steps, {whole:.3f} s; {name} GPU ms "
                    f"{statistics.median(gpu):.3f}, spread {100 * (max(gpu) / min(gpu) - 1):.2f}%"
                )
        pw.WINDOW_S = default


if __name__ == "__main__":
    main()
