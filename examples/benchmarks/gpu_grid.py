"""Run the seminar grids on this machine's GPU through the real cell entry point and print a table.

    python examples/benchmarks/gpu_grid.py --grid llm --out DIR     # gpt small/medium x
                                                                 # eager/cudagraphs/inductor
    python examples/benchmarks/gpu_grid.py --grid cnn --out DIR     # resnet small/medium/large x
                                                                 # eager/torchscript/inductor
    python examples/benchmarks/gpu_grid.py --grid llm cnn --out DIR # both

Each cell runs as its own `python -m workloads.run` process (as a Slurm job would), so no
compiled state or memory carries from one cell to the next. bf16 autocast, synthetic data.
Needs no orchestrator: only workloads/ and its dependencies.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parents[2]


def cell(family: str, size: str, backend_name: str, steps: int, warmup: int, **extra) -> tuple[str, dict]:
    """(cell name, config) of one grid cell; `extra` holds further top-level or nested keys."""
    config = {
        "model": {"name": family},
        "size": size,
        "backend": {"name": backend_name},
        "precision": {"name": "bf16"},
        "steps": steps,
        "warmup_steps": warmup,
        "device": "cuda",
    }
    suffix = ""
    for key, value in extra.items():
        if isinstance(value, dict):
            config[key] = {**config.get(key, {}), **value}
            suffix += "".join(f"-{k}={v}" for k, v in value.items())
        else:
            config[key] = value
            suffix += f"-{key}={value}"
    return f"{family}-{size}-{backend_name}{suffix}", config


GRIDS = {
    "llm": [
        cell("gpt", size, backend, steps, warmup)
        for size, steps, warmup in (("small", 100, 10), ("medium", 10, 3))
        for backend in ("eager", "cudagraphs", "inductor")
    ],
    "llm-small": [cell("gpt", "small", backend, 100, 10) for backend in ("eager", "cudagraphs", "inductor")],
    "llm-medium": [cell("gpt", "medium", backend, 10, 3) for backend in ("eager", "cudagraphs")],
    "cnn": [
        cell("resnet", size, backend, 50, 5)
        for size in ("small", "medium", "large")
        for backend in ("eager", "torchscript", "inductor")
    ],
    # The peers' timm benchmark runs NCHW; our default is channels-last.
    "cnn-nchw": [
        cell("resnet", "small", backend, 50, 5, model={"channels_last": False})
        for backend in ("eager", "inductor")
    ],
    # Gradient accumulation under CUDA graph replay must train exactly like eager (fp32, no TF32).
    "accum-check": [
        cell(
            "gpt",
            "tiny",
            backend,
            10,
            3,
            precision={"name": "fp32"},
            grad_accum=4,
            **({"backend": {"mode": mode}} if mode else {}),
        )
        for backend, mode in (
            ("eager", None),
            ("aot_eager", None),
            ("cudagraphs", None),
            ("inductor", "reduce-overhead"),
            ("inductor", None),
        )
    ],
}


def run_grid(grid: str, out: Path, timeout_s: float) -> list[dict]:
    rows = []
    for name, config in GRIDS[grid]:
        cell_dir = out / name
        cell_dir.mkdir(parents=True, exist_ok=True)
        config = {**config, "cell_id": name}
        (cell_dir / "config.yaml").write_text(yaml.safe_dump(config))
        start = time.perf_counter()
        with open(cell_dir / "log.txt", "w") as log:
            try:
                subprocess.run(
                    [sys.executable, "-m", "workloads.run", str(cell_dir / "config.yaml")],
                    cwd=REPO,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=timeout_s,
                )
            except subprocess.TimeoutExpired:
                print(f"{name}: timed out after {timeout_s:.0f} s", flush=True)
        wall = time.perf_counter() - start
        run_file = cell_dir / "run.parquet"
        row = pq.read_table(run_file).to_pylist()[-1] if run_file.exists() else {"status": "no result"}
        steps_file = cell_dir / "steps.parquet"
        losses = pq.read_table(steps_file).column("loss").to_pylist() if steps_file.exists() else []
        row.update(cell=name, wall_s=wall, losses=losses, loss_vs_eager=None)
        eager = next(
            (r for r in rows if r["cell"].split("-")[:2] == name.split("-")[:2] and r["backend"] == "eager"),
            None,
        )
        if eager and losses and eager["losses"]:
            n = min(len(losses), len(eager["losses"]))
            row["loss_vs_eager"] = max(abs(a - b) / abs(b) for a, b in zip(losses[:n], eager["losses"][:n]))
        rows.append(row)
        print(format_row(row), flush=True)
    return rows


def format_row(r: dict) -> str:
    def f(key: str, fmt: str, scale: float = 1.0) -> str:
        value = r.get(key)
        return "-" if value is None else format(value * scale, fmt)

    return (
        f"| {r['cell']} | {r.get('status')} | {f('median_step_ms', '.2f')} | {f('std_step_ms', '.2f')} | "
        f"{f('items_per_s', ',.0f')} | {f('mfu', '.1f', 100)} | {f('compile_time_s', '.1f')} | "
        f"{r.get('graph_count', '-')} | {r.get('graph_break_count', '-')} | "
        f"{f('peak_mem_bytes', '.1f', 2**-30)} | {f('loss_vs_eager', '.1e')} | {r['wall_s']:.0f} |"
    )


HEADER = (
    "| cell | status | median step ms | std ms | items/s | MFU % | compile s | graphs | breaks | "
    "peak GiB | max rel. loss diff vs eager | wall s |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", choices=sorted(GRIDS), nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per cell")
    args = parser.parse_args()
    print(HEADER, flush=True)
    rows = [row for grid in args.grid for row in run_grid(grid, args.out, args.timeout)]
    first = next((r for r in rows if r.get("gpu_name")), {})
    print(
        f"\n{first.get('gpu_name')}, torch {first.get('torch_version')}, "
        f"triton {first.get('triton_version')}, "
        f"timm {first.get('timm_version')}\n{HEADER}"
    )
    for row in rows:
        print(format_row(row))


if __name__ == "__main__":
    main()
