"""The measurement study of issue 11 on one GPU: the seminar grids with replicates, the gpt-small
pair that disagreed with itself, the data-bound JPEG case, and timm's benchmark.py at equal pixels.

Each part runs real `compilebench sweep`s (cluster=local: every replicate its own process) and
prints how long each took on the GPU; the sweep directories are packed into OUT for `compilebench
analyze` here. One part per device call (each call has 10 minutes); a warm machine keeps the
inductor cache between calls, as a cluster's shared cache would.

    PYTHONPATH=/tmp/site:. python examples/benchmarks/replicate_study.py --part llm_small pair --out "$OUT"
    parts: llm_small, llm_medium (seminar_llm, repeats 3), cnn (seminar_cnn, repeats 3), pair (gpt small
    eager/inductor, seeds 1 and 2, repeats 3), jpeg (resnet18 on real JPEGs, 4 workers, repeats 3), timm
    (timm's benchmark.py from .carry/peers beside our cells, 224 px, bf16, batch 256, channels-last),
    timm_depthwise (the same for mobilenetv2_100 and efficientnet_b0 at the timm_train suite's batch 128)
    Paired measurement (issue 25; each part asked twice, on two freshly started machines):
    paired_launch (gpt small bf16 and resnet50 at batch 16, eager/inductor, repeats 3, the default measuring;
    gpt small again with measure.paired=false, for the cost and the unpaired answer), paired_suite (the
    timm_train suite's launch-bound models that moved between runs, repeats 3), paired_gpu_bound (GPT-2
    124M at one micro-step and resnet50 at batch 256, where paired and unpaired must agree)
    Device time (issue 39; each part asked on two freshly started machines, compared by
    examples/benchmarks/device_time_two_machines.py): device_time_gpt (gpt small bf16 inductor and cudagraphs,
    resnet18 bf16 batch 32 channels-last and mobilenetv3_large_100 at the timm_train suite's settings,
    inductor), device_time_cnn (resnet50d and efficientnetv2_rw_s, the suite models that moved most,
    inductor); repeats 3, paired, no eager cells. `--neighbours N` runs the parts' sweeps (named
    NAME_neighbours N) beside N processes that spin on the CPU, another job's busy CPUs on the node. It
    did not slow the host: resnet18 beside 16 on a 16-core H200 machine launched at 28.1 µs against 30.6
    quiet (docs/gpu-results.md, 4782de5), so it shows what a busy node does, not a slower host
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import tarfile
import time
from pathlib import Path

SWEEPS = Path("/tmp/study")
REPEATS = "repeats=3"
#: `steps` is the minimum count; the measuring time (MEASURE) governs every cell faster than 0.4 s a
#: step. GPT-2 (1.1-1.4 s a step, GPU-bound) then measures 5 steps a replicate instead of 20.
STEPS = "steps=5"
#: Measure as long as the answer needs: 2 s where the median's own 95% interval is within ±0.5% by
#: then (the ResNets' replicates differed by 0.0-0.2% after 5 s), up to 5 s (the default) where it
#: is not (launch-bound cells); GPT-2 (1.1-1.4 s a step) measures its 5 steps.
MEASURE = ["measure.min_seconds=2", "measure.rel_ci=0.005", "measure.max_seconds=5"]
#: GPT-2's steps after the first are within 0.3% of the measured median under every backend (the
#: warm-up steps of the 2026-11-22 study, docs/gpu-results.md): one more warm-up step than the
#: compiling one suffices, where 5 cost 5.6 s of a 1.4 s step per replicate.
GPT2_WARMUP = "warmup_steps=2"
#: The timm_train suite's models whose speedup moved most between runs (docs/gpu-results.md, "What a
#: re-run shows": efficientnetv2_rw_s 0.72-1.31x, resnet50d 1.29-1.72x, fbnetv3_b 0.70-0.97x).
MOVED = ("efficientnetv2_rw_s", "resnet50d", "fbnetv3_b", "mobilenetv3_large_100")
PARTS: dict[str, list[tuple[str, list[str]]]] = {
    "llm_small": [
        (
            "seminar_llm_small",
            ["+experiment=seminar_llm", "size=small", "device=cuda", STEPS, *MEASURE, REPEATS],
        )
    ],
    "llm_medium": [
        (
            "seminar_llm_medium",
            ["+experiment=seminar_llm", "size=medium", "device=cuda", STEPS, GPT2_WARMUP, *MEASURE, REPEATS],
        )
    ],
    "cnn": [("seminar_cnn", ["+experiment=seminar_cnn", "device=cuda", STEPS, *MEASURE, REPEATS])],
    "pair": [
        (
            "gpt_small_pair",
            [
                "model=gpt",
                "size=small",
                "backend=eager,inductor",
                "precision=bf16",
                "device=cuda",
                "steps=300",
                "warmup_steps=10",
                "seed=1,2",
                REPEATS,
            ],
        )
    ],
    "jpeg": [
        (
            "jpeg_resnet18",
            [
                "+experiment=seminar_cnn",
                "size=small",
                "backend=eager,inductor",
                "device=cuda",
                "data.source=imagefolder",
                "data.path=/tmp/jpegs",
                "data.workers=4",
                REPEATS,
            ],
        )
    ],
    "timm": [
        (
            "timm_side_by_side",
            [
                "model=resnet",
                "size=small,large",
                "backend=eager,inductor",
                "precision=bf16",
                "batch_size=256",
                "device=cuda",
            ],
        )
    ],
    "timm_r18_eager": [
        (
            "timm_side_by_side_r18_eager",
            [
                "model=resnet",
                "size=small",
                "backend=eager",
                "precision=bf16",
                "batch_size=256",
                "device=cuda",
            ],
        )
    ],
    # Two of the depthwise-convolution models that the timm_train suite found slower compiled, at its
    # settings.
    "timm_depthwise": [
        (
            "timm_side_by_side_depthwise",
            [
                "model=timm",
                "model.arch=mobilenetv2_100,efficientnet_b0",
                "size=small",
                "backend=eager,inductor",
                "precision=bf16",
                "batch_size=128",
                "measure.min_seconds=2",
                "device=cuda",
            ],
        )
    ],
    "paired_launch": [
        (
            "paired_gpt_small",
            ["model=gpt", "size=small", "backend=eager,inductor", "precision=bf16", "device=cuda", REPEATS],
        ),
        (
            "unpaired_gpt_small",
            ["model=gpt", "size=small", "backend=eager,inductor", "precision=bf16", "device=cuda", REPEATS]
            + ["measure.paired=false"],
        ),
        (
            "paired_resnet50_b16",
            ["model=resnet", "size=large", "batch_size=16", "backend=eager,inductor", "precision=bf16"]
            + ["device=cuda", REPEATS],
        ),
    ],
    "paired_suite": [
        (
            "paired_suite_moved",
            ["+suite=timm_train", f"model.arch={','.join(MOVED)}", "device=cuda", REPEATS],
        )
    ],
    "device_time_gpt": [
        (
            "device_time_gpt_small",
            [
                "model=gpt",
                "size=small",
                "backend=inductor,cudagraphs",
                "precision=bf16",
                "device=cuda",
                REPEATS,
            ],
        ),
        (
            "device_time_resnet18_b32",
            ["model=timm", "model.arch=resnet18", "size=small", "batch_size=32", "model.channels_last=true"]
            + ["backend=inductor", "precision=bf16", "device=cuda", REPEATS],
        ),
        (
            "device_time_mobilenetv3",
            [
                "+suite=timm_train",
                "model.arch=mobilenetv3_large_100",
                "backend=inductor",
                "device=cuda",
                REPEATS,
            ],
        ),
    ],
    "device_time_cnn": [
        (
            "device_time_suite_moved",
            ["+suite=timm_train", "model.arch=resnet50d,efficientnetv2_rw_s"]
            + ["backend=inductor", "device=cuda", REPEATS],
        )
    ],
    "paired_gpu_bound": [
        (
            "paired_gpt2",
            ["model=gpt", "size=medium", "grad_accum=1", "backend=eager,inductor", "precision=bf16"]
            + ["device=cuda", "repeats=2"],
        ),
        (
            "paired_resnet50_b256",
            ["model=resnet", "size=large", "batch_size=256", "backend=eager,inductor", "precision=bf16"]
            + ["device=cuda", "repeats=2"],
        ),
    ],
}
#: timm's benchmark.py runs beside the parts that compare with it: (model, batch, extra arguments).
COMPILED = ([], ["--torchcompile", "inductor"])
PEER_RUNS = {
    "timm": [(model, 256, extra) for model in ("resnet18", "resnet50") for extra in COMPILED],
    "timm_r18_eager": [("resnet18", 256, [])],
    "timm_depthwise": [
        (model, 128, extra) for model in ("mobilenetv2_100", "efficientnet_b0") for extra in COMPILED
    ],
}
TIMM_BENCHMARK = Path(".carry/peers/timm_benchmark.py")


def make_jpegs(root: Path, classes: int = 10, per_class: int = 300, size: int = 256) -> None:
    """An ImageFolder of real JPEG files (random noise, as the tests make), decoded by the loader."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        (root / f"class{c}").mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{i}.jpg", quality=90)


def sweep(name: str, overrides: list[str]) -> float:
    """Run one sweep here; returns its wall seconds (every replicate's process, compile included)."""
    start = time.monotonic()
    code = subprocess.call(
        [
            sys.executable,
            "-m",
            "orchestrator.cli.main",
            "sweep",
            *overrides,
            f"hydra.sweep.dir={SWEEPS / name}",
        ]
    )
    seconds = time.monotonic() - start
    print(f"== {name}: exit {code}, {seconds:.0f} s on the GPU ({seconds / 60:.2f} GPU-minutes)", flush=True)
    return seconds


def _without_compile_cache(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """The sweep without its compile cache (hundreds of MB of kernels nobody analyses)."""
    return None if "/compile_cache" in member.name else member


def timm_peer(runs: list[tuple[str, int, list[str]]]) -> None:
    """timm's benchmark.py at the train size (224 px), as our cells: bf16, the cells' batch, channels-last."""
    for model, batch, extra in runs:
        command = [
            sys.executable,
            str(TIMM_BENCHMARK),
            "--model",
            model,
            "--bench",
            "train",
            "--amp",
            "--amp-dtype",
            "bfloat16",
            "-b",
            str(batch),
            "--channels-last",
            "--use-train-size",
            *extra,
        ]
        print("== timm", " ".join(command[2:]), flush=True)
        subprocess.call(command)


@contextlib.contextmanager
def neighbours(count: int):
    """`count` processes spinning on the CPU for as long as the block runs (none for 0)."""
    spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for process in spinning:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(PARTS), nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--only", nargs="+", metavar="SWEEP", help="of the parts' sweeps, run only these")
    parser.add_argument("--neighbours", type=int, default=0, help="processes spinning beside the sweeps")
    args = parser.parse_args()
    subprocess.call(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu",
            "--format=csv",
        ]
    )
    for part in args.part:
        if part == "jpeg" and not Path("/tmp/jpegs").exists():
            make_jpegs(Path("/tmp/jpegs"))
        for name, overrides in PARTS[part]:
            if args.only and name not in args.only:
                continue
            if args.neighbours:
                name = f"{name}_neighbours{args.neighbours}"
            with neighbours(args.neighbours):
                sweep(name, overrides)
            with tarfile.open(
                args.out / f"{name}.tar.gz", "w:gz"
            ) as tar:  # back even if a later part runs out of time
                tar.add(SWEEPS / name, arcname=name, filter=_without_compile_cache)
        if part in PEER_RUNS:
            timm_peer(PEER_RUNS[part])


if __name__ == "__main__":
    main()
