"""nanoGPT's own train.py and our GPT cell, alternated on one machine, on the same synthetic tokens.

    python examples/benchmarks/nanogpt_side_by_side.py --nanogpt PATH/TO/nanoGPT [--iters 15]

PATH is an unmodified nanoGPT checkout kept outside the project (an ignored folder); it is
run as a program, never imported. Both sides: train_gpt2 config (124M, 12 x 1024 tokens x 40
micro-steps), bf16 autocast, fused AdamW; nanoGPT with log_interval=1 so its per-iteration
time ends with a device sync, like ours. Medians skip the first 3 iterations.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import yaml

REPO = Path(__file__).resolve().parents[2]
SKIP = 3
ITER_LINE = re.compile(r"iter (\d+): loss [\d.]+, time ([\d.]+)ms")


def write_synthetic_dataset(nanogpt: Path, tokens: int, vocab: int = 50257) -> str:
    """Random GPT-2 token ids as nanoGPT's train.bin/val.bin (its data/<name>/ layout)."""
    name = "compilebench_synthetic"
    folder = nanogpt / "data" / name
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        rng.integers(0, vocab, tokens, dtype=np.uint16).tofile(folder / f"{split}.bin")
    return name


def nanogpt_median_ms(nanogpt: Path, dataset: str, compile_: bool, iters: int) -> float:
    out = subprocess.run(
        [
            sys.executable,
            "train.py",
            "config/train_gpt2.py",
            f"--dataset={dataset}",
            f"--max_iters={iters}",
            "--eval_interval=1000000",
            "--eval_iters=1",
            "--log_interval=1",
            "--wandb_log=False",
            "--always_save_checkpoint=False",
            f"--compile={compile_}",
            f"--out_dir={tempfile.mkdtemp()}",
        ],
        cwd=nanogpt,
        capture_output=True,
        text=True,
        check=True,
    )
    times = [float(t) for i, t in ITER_LINE.findall(out.stdout) if int(i) >= SKIP]
    return statistics.median(times)


def ours_median_ms(backend: str, iters: int) -> float:
    cell_dir = Path(tempfile.mkdtemp())
    config = {
        "model": {"name": "gpt"},
        "size": "medium",
        "backend": {"name": backend},
        "precision": {"name": "bf16"},
        "steps": iters - SKIP,
        "warmup_steps": SKIP,
        "device": "cuda",
    }
    (cell_dir / "config.yaml").write_text(yaml.safe_dump(config))
    subprocess.run(
        [sys.executable, "-m", "workloads.run", str(cell_dir / "config.yaml")],
        cwd=REPO,
        capture_output=True,
        check=True,
    )
    return pq.read_table(cell_dir / "run.parquet").column("median_step_ms")[0].as_py()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nanogpt", type=Path, required=True)
    parser.add_argument("--iters", type=int, default=15)
    args = parser.parse_args()
    dataset = write_synthetic_dataset(args.nanogpt, tokens=5_000_000)
    print("| train_gpt2 (124M) | nanoGPT train.py median ms | compilebench median ms | ours / nanoGPT |")
    print("|---|---|---|---|")
    for backend in ("eager", "inductor"):
        theirs = nanogpt_median_ms(args.nanogpt, dataset, backend == "inductor", args.iters)
        ours = ours_median_ms(backend, args.iters)
        print(f"| {backend} | {theirs:.1f} | {ours:.1f} | {ours / theirs:.3f} |", flush=True)


if __name__ == "__main__":
    main()
