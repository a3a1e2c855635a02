"""Record NVML's total-energy counter as a cell's idle reading sees it: each update as a 2 ms poll
saw it, [host seconds, mJ]. What the idle settling and the update period in
workloads/instruments/energy.py were chosen on; its output on an H100 (97 s) is
results/h100_2026-11-27_energy_counter/counter_series.json, which tests/unit/workloads/test_gpu_energy.py
replays.

- after another process: a child process runs 5 s of bf16 matmuls and exits; this process polls
  for 12 s, first without a CUDA context of its own (`after_process_no_context`), then again with
  one (`after_process_own_context`: the board stays in P0 while a context lives);
- in one process, with its context: idle (`fresh`, 3 s), then 12 s after each of three loads, with
  NVML's power reading every 50 ms beside the updates (`power_mw`, [host seconds, mW]).

    python3 examples/benchmarks/energy_counter_probe.py     # on the GPU machine, ~100 s; JSON in $OUT
"""

import json
import os
import subprocess
import sys
import time

import pynvml
import torch

LOAD = (
    "import sys, time, torch\n"
    "n, seconds = int(sys.argv[1]), float(sys.argv[2])\n"
    "a = torch.randn(n, n, device='cuda', dtype=torch.bfloat16)\n"
    "t0 = time.monotonic()\n"
    "while time.monotonic() - t0 < seconds:\n"
    "    [a @ a for _ in range(20)]\n"
    "    torch.cuda.synchronize()\n"
)


def poll(handle, seconds: float) -> dict[str, list]:
    t0, last = time.monotonic(), pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    updates, power, next_power = [], [], t0
    while (now := time.monotonic()) - t0 < seconds:
        value = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        if value != last:
            updates.append((now, value))
            last = value
        if now >= next_power:
            power.append((now, pynvml.nvmlDeviceGetPowerUsage(handle)))
            next_power = now + 0.05
        time.sleep(0.002)
    return {"updates": updates, "power_mw": power}


def per_second(updates: list) -> list[int]:
    return [round((b[1] - a[1]) / 1e3 / (b[0] - a[0])) for a, b in zip(updates[::10], updates[10::10])]


def main() -> None:
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    load = lambda n, seconds: subprocess.run([sys.executable, "-c", LOAD, str(n), str(seconds)], check=True)  # noqa: E731
    series = {}
    for name in ("after_process_no_context", "after_process_own_context"):
        load(8192, 5.0)
        if name.endswith("own_context"):
            torch.zeros(1, device="cuda")
            torch.cuda.synchronize()
        series[name] = poll(handle, 12.0)
    series["fresh"] = poll(handle, 3.0)
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for name, seconds, n in (
        ("after_heavy_5s", 5.0, 8192),
        ("after_light_2s", 2.0, 2048),
        ("after_heavy_1s", 1.0, 8192),
    ):
        t0 = time.monotonic()
        while time.monotonic() - t0 < seconds:
            [a[:n, :n] @ a[:n, :n] for _ in range(20)]
            torch.cuda.synchronize()
        series[name] = poll(handle, 12.0)
    for name, recorded in series.items():
        print(name, "W per second:", per_second(recorded["updates"]))
    with open(os.path.join(os.environ.get("OUT", "."), "counter_series.json"), "w") as fh:
        json.dump({"device": torch.cuda.get_device_name(), "series": series}, fh)


if __name__ == "__main__":
    main()
