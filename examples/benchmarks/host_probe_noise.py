"""The host probe's own noise on this machine: before against after measuring, and between processes.

Each of N fresh processes takes the probes a cell takes (workloads/instruments/host_load.py: the
pure-Python loop `python_op_us`, which `compare` weighs, and the tiny op `op_overhead_us` on DEVICE),
then trains a small MLP for about a second as a cell's measured steps would, then takes them again.
Printed: each process's probes, and per probe the before/after ratios and the spread of the
processes' probes (the noise `compare`'s host-change rule rests on: docs/analysis.md "Comparing two
sweeps"), and what the probes took.

    PYTHONPATH=. python examples/benchmarks/host_probe_noise.py [PROCESSES] [DEVICE]
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np

CHILD = """
import json, time, torch
from workloads.instruments.host_load import op_overhead_us, python_op_us
device = torch.device(sys.argv[1])
op_overhead_us(device)  # its imports, once
start = time.perf_counter()
before = python_op_us(), op_overhead_us(device)
probe_s = time.perf_counter() - start
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256, device=device), torch.randint(0, 10, (64,), device=device)
end = time.perf_counter() + 1.0
while time.perf_counter() < end:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
after = python_op_us(), op_overhead_us(device)
print(json.dumps({"before": before, "after": after, "probe_ms": probe_s * 1e3}))
"""


def main(processes: int, device: str) -> None:
    rows = []
    for _ in range(processes):
        out = subprocess.run(
            [sys.executable, "-c", "import sys\n" + CHILD, device], capture_output=True, text=True, check=True
        )
        rows.append(json.loads(out.stdout))
        print(rows[-1], flush=True)
    probe_ms = np.median([row["probe_ms"] for row in rows])
    print(f"{processes} processes on {device}: the probes took {probe_ms:.1f} ms")
    for k, name in enumerate(("python_op_us", "op_overhead_us")):
        before, after = (np.array([row[key][k] for row in rows]) for key in ("before", "after"))
        within = np.log(after / before)
        per_process = np.log(np.sqrt(before * after))
        print(
            f"{name}: after/before median {np.exp(np.median(within)):.3f}, |log| median "
            f"{np.median(np.abs(within)):.3f}, max {np.abs(within).max():.3f}, sd {within.std(ddof=1):.3f}; "
            f"between processes (geometric mean of before and after): {np.exp(per_process.min()):.2f}-"
            f"{np.exp(per_process.max()):.2f} µs, sd of log {per_process.std(ddof=1):.3f}"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10, sys.argv[2] if len(sys.argv) > 2 else "cpu")
