"""Record NVML's total-energy counter on an idle GPU and after loads: each update as a 2 ms poll saw
it, [host seconds, mJ], and NVML's power reading every 50 ms; printed summaries, and the series in
$OUT/counter_series.json. What the idle settling and the update period in
workloads/instruments/energy.py were chosen on; its recording on an H100 is in
results/h100_2026-11-27_energy_counter/. Through ctypes: NVML alone, no Python package.

    python3 tests/benchmarks/energy_counter_probe.py     # on the GPU machine, ~55 s
"""

import ctypes
import json
import os
import sys
import time

import torch

nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
e = ctypes.c_ulonglong()
p = ctypes.c_uint()


def mj():
    nv.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e))
    return e.value


def mw():
    nv.nvmlDeviceGetPowerUsage(h, ctypes.byref(p))
    return p.value


def poll(seconds):
    t0 = time.monotonic()
    last = mj()
    ups = []
    pw = []
    nextp = t0
    while (now := time.monotonic()) - t0 < seconds:
        v = mj()
        if v != last:
            ups.append((now, v))
            last = v
        if now >= nextp:
            pw.append((now, mw()))
            nextp = now + 0.05
        time.sleep(0.002)
    return ups, pw


def load(seconds, n=8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for _ in range(20):
            a @ b
        torch.cuda.synchronize()


out = {}
torch.cuda.init()
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
out["fresh"] = poll(3.0)
for name, secs, n in (
    ("after_heavy_5s", 5.0, 8192),
    ("after_light_2s", 2.0, 2048),
    ("after_heavy_1s", 1.0, 8192),
):
    load(secs, n)
    t = time.monotonic()
    ups, pw = poll(12.0)
    out[name] = (ups, pw)
    iv = [b[0] - a[0] for a, b in zip(ups, ups[1:])]
    print(
        name,
        "updates",
        len(ups),
        "median interval",
        sorted(iv)[len(iv) // 2] if iv else None,
        "min",
        min(iv) if iv else None,
        "max",
        max(iv) if iv else None,
    )
    ws = [(b[1] - a[1]) / (b[0] - a[0]) / 1e3 for a, b in zip(ups, ups[1:])]
    print(" W per interval (first 40):", [round(w) for w in ws[:40]])
    print(" W per interval (last 10):", [round(w) for w in ws[-10:]])
    print(" power readings every 0.5s:", [round(x[1] / 1e3) for x in pw[::10]])
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "counter_series.json"), "w"))
print(torch.cuda.get_device_name(), file=sys.stderr)
