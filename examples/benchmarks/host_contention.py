"""Does a busy neighbour slow a launch-bound process, and which CPUs make a neighbour? (issue 12)

On the GPU machine: the host time per tiny CUDA op (workloads/host_load.op_overhead_us, what each
eager op pays) of one process pinned to CPU 0, while spinning processes (a stand-in for another
job's inductor compile workers) hold other CPUs: none, CPU 1, CPU N/2 (the hyperthread sibling of
CPU 0 where the kernel numbers siblings that way), the other half, the own half. Also the CPU
topology as the guest kernel sees it, and the hypervisor's steal over each condition.
    python examples/benchmarks/host_contention.py [SECONDS_PER_CONDITION]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workloads.instruments.host_load import op_overhead_us, sample, window  # noqa: E402


def spin(cpu: int) -> None:
    os.sched_setaffinity(0, {cpu})
    while True:
        pass


def topology() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    lines = []
    for cpu in cpus[:4] + cpus[len(cpus) // 2 : len(cpus) // 2 + 2]:
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        lines.append(f"cpu{cpu} siblings: {path.read_text().strip() if path.exists() else '?'}")
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    keep = (
        "Model name",
        "Thread(s) per core",
        "Core(s) per socket",
        "Socket(s)",
        "NUMA node(s)",
        "Hypervisor",
    )
    return "\n".join([*(line for line in lscpu.splitlines() if line.startswith(keep)), *lines])


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    print(topology(), flush=True)
    cpus = sorted(os.sched_getaffinity(0))
    n = len(cpus)
    half = n // 2
    conditions = {
        "quiet": [],
        "spinner on cpu 1": [1],
        f"spinner on cpu {half}": [half],
        f"spinners on cpus {half}-{n - 1} (the other half)": list(range(half, n)),
        f"spinners on cpus 1-{half - 1} (own half)": list(range(1, half)),
        "quiet again": [],
    }
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    os.sched_setaffinity(0, {0})
    op_overhead_us(device)  # the CUDA context, outside every condition
    print(f"device {device}; {seconds} s per condition")
    print(
        f"{'condition':<45} {'host µs/op median':>18} {'p90':>8} {'others busy':>12} {'steal':>7}", flush=True
    )
    for name, spinning in conditions.items():
        workers = [mp.Process(target=spin, args=(cpu,), daemon=True) for cpu in spinning]
        for w in workers:
            w.start()
        time.sleep(0.5)
        begin, values, end_at = sample(), [], time.monotonic() + seconds
        while time.monotonic() < end_at:
            values.append(op_overhead_us(device))
        load = window(begin, sample())
        for w in workers:
            w.kill()
            w.join()
        values.sort()
        print(
            f"{name:<45} {statistics.median(values):>18.2f} {values[int(0.9 * len(values))]:>8.2f} "
            f"{load['node_cpus_busy_other']:>12.2f} {load['cpu_steal_share']:>7.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
