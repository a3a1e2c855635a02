"""The GPU tier (`pytest -m gpu`, on a machine with CUDA): what the headline numbers rely on and a
CPU cannot show. CI has no GPU and never selects it (`.ci/run` passes `-m "not gpu"`); without
CUDA every test here skips and says why, the two-GPU one also without a second GPU.

- The CUDA-event step times (their median, which every table uses) against a synchronised
  reference (perf_counter around windows of steps bracketed by torch.cuda.synchronize()), for a
  device-bound step and a real GPT-2 step eager, compiled by inductor and replayed as CUDA graphs.
- Gradient accumulation under CUDA-graph replay trains exactly as eager (the kept gradients of
  workloads/cell/train.py TrainStep), and without that fix it does not.
- MFU on a real GPU: between 0 and 1, above a floor for GPT-2, and no faster than the GPU's own
  dense matmuls, which in turn stay under the peak of the project's table.
- A two-GPU NCCL DDP cell, launched as Slurm launches one: two processes of workloads.run's main
  with torch's env:// variables; the ranks end training with equal parameters.
- `not_compiled` on a GPU: a cudagraphs cell with torch.compile disabled, or whose model has a
  CPU-side op (CUDA graphs skipped), is not passed off as compiled; the same model without the
  op completes.
- A CUDA OOM cell of a local sweep records `oom`, and the sweep's next cell runs and completes.
- Paired cells (inductor, cudagraphs) time their own force_eager side, block by block, on the GPU;
  each side's peak memory is its own: a paired GPT-2's compiled side's as an unpaired cell's, its
  eager side's as the eager cell's.
- The measured loop's CUDA path (stop rule with steps in flight) and the GPU's provenance.
- The GPU's busy share of a profiled window: a step of tiny ops is launch-bound, one of large
  matmuls is not; cells record it for each side, kernels replayed in CUDA graphs included.


- The GPU's energy: a GPT-2 cell's NVML energy counter over its measured window (eager, and
  inductor paired with its eager side) agrees with NVML's power readings integrated over the same
  window, its joules per step stay below the power limit's, its window covers its steps.
- The accuracy check of inductor, cudagraphs and reduce-overhead cells (bf16, dropout, gradient
  accumulation) passes, eager's rerun within the precision's tolerance.
- precision=fp8 (torchao, the extra `compilebench[fp8]`; skipped without it or without fp8 tensor
  cores): a tiny GPT trains eager and under inductor with its blocks' Linear layers in fp8 and its
  lm_head not, finite losses, MFU against the fp8 peak; the inductor cell passes the accuracy check.

Needs only what `workloads` needs (torch, timm, numpy, pyarrow, pyyaml, nvidia-ml-py), pandas (the
local executor, tests/helpers/) and pytest: no Hydra, OmegaConf or submitit. How to run it and what
it showed: docs/testing.md ("The GPU tier").
"""

from __future__ import annotations

import gc
import io
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from torch import nn

from tests.helpers import REPO_ROOT, take_turn_ahead, with_instruments
from workloads.cell.config import MeasureConfig
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.precision import PRECISIONS
from workloads.cell.recorder import CellRecorder
from workloads.cell.train import HOST_LEAD_STEPS, StepRecord, run_steps, synchronize
from workloads.instruments.base import Instrument
from workloads.instruments.dynamo_records import compile_stats
from workloads.instruments.environment import peak_tflops

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available(),
        reason="the GPU tier needs a CUDA device (none visible here); run `pytest -m gpu` on a GPU machine",
    ),
]

Step = Callable[[], tuple[torch.Tensor, float]]


def exactly(steps: int) -> MeasureConfig:
    """A measure section that stops at exactly `steps` measured steps."""
    return MeasureConfig(min_seconds=0.0, max_steps=steps, max_seconds=None)


def measured(records: list[StepRecord]) -> list[StepRecord]:
    return [r for r in records if r.phase == "measure"]


def gpu_config(**values) -> dict:
    """A cell config on the GPU: the tiny GPT in fp32 unless `values` say otherwise; exactly
    `steps` measured steps, unpaired."""
    return {
        "model": {"name": "gpt"},
        "size": "tiny",
        "precision": {"name": "fp32"},
        "device": "cuda",
        "steps": 8,
        "warmup_steps": 3,
        "seed": 1337,
        "measure": {"min_seconds": 0.0, "paired": False},
        **values,
    }


def prepared(**values):
    """A cell built in this process (workloads.train_cell.prepare_cell) on the GPU, ready to step."""
    from workloads.train_cell import prepare_cell

    return prepare_cell(cell_config_from_dict(gpu_config(**values)), CellRecorder("gpu-tier", 1))


# --- 1. CUDA-event step times against a synchronised reference ---------------------------------


def synchronised_windows_ms(step: Step, windows: int, size: int, device: torch.device) -> list[float]:
    """The reference, with no event involved: `windows` windows of `size` steps back to back, each
    timed by the host clock from one torch.cuda.synchronize() to the next; each window's mean step,
    as the device ran it. (A sync before every single step leaves the device waiting while the host
    starts the next: about 4% of a GPT-2 step on the H100, eager, compiled or CUDA graphs alike.
    Over a window of `size` steps that start-up counts once.)"""
    means = []
    for _ in range(windows):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(size):
            step()
        synchronize(device)
        means.append((time.perf_counter() - start) * 1e3 / size)
    return means


def memory_step(device: torch.device) -> Step:
    """A step of 16 passes over a 1 GiB bf16 tensor, each reading it and writing another (32 GiB
    moved, 8.1 ms on an H200): 16 launches and long device work, so the host runs far ahead of
    the device. Memory-bound, so that its time follows the memory's clock, which holds: 8 bf16
    8192x8192 matmuls, the first choice, follow the SMs' clock under their power draw (on the H100
    their steps took 12.2 to 15.8 ms within one run, and the medians of a round's two halves were
    once 3.6% apart: the GPU's drift, not the timing's error)."""
    a = torch.randn(2**29, device=device, dtype=torch.bfloat16)
    b = torch.empty_like(a)

    def step() -> tuple[torch.Tensor, float]:
        source, target = a, b
        for _ in range(16):
            torch.mul(source, 1.0, out=target)
            source, target = target, source
        return source[0].float(), 0.0

    return step


def gpt2_step(backend: str) -> Callable[[torch.device], Step]:
    """A real training step of GPT-2 124M (bf16, batch 12, one micro-step) under `backend`, as a
    cell builds it: eager (hundreds of launches; on an H100 the host's launching takes about as
    long as the device's work), inductor (compiled kernels) or cudagraphs (the step's forward and
    backward replayed as CUDA graphs)."""

    def make(device: torch.device) -> Step:
        cell = prepared(size="medium", precision={"name": "bf16"}, grad_accum=1, backend={"name": backend})
        return cell.step

    make.__name__ = f"gpt2_{backend}_step"
    return make


#: Rounds of the comparison; each runs the measured loop (2 warm-up + EVENT_STEPS measured steps),
#: then the reference (one warm step, then REF_STEPS steps in synchronised windows). The rounds
#: alternate, so that a drift of the clocks falls on both.
ROUNDS, EVENT_STEPS, REF_STEPS = 3, 20, 20
#: How far the event-timed median step (what every table uses) may be from the reference's fastest
#: window. Measured (docs/results/gpu_tier_{h100,h200}_*.txt), event median against the
#: fastest window of 5: GPT-2 eager -0.75%, -0.60% (H100) and -0.14% (H200); inductor +0.31%,
#: -0.12%, -0.37%; cudagraphs -0.41%, -0.62%, -0.67%; the memory-bound step against the fastest
#: single step -0.04% (H200). 3% is four times the largest. (Against the windows' median instead,
#: inductor on the H200 was -3.47%: more than half its windows were slowed, 25.3 to 30.4 ms.)
EVENT_VS_SYNC_RTOL = 0.03


@pytest.mark.parametrize(
    "make_step, backend, window",
    [
        (memory_step, None, 1),  # device-bound: launching takes microseconds, every step is its own window
        (gpt2_step("eager"), None, 5),
        (gpt2_step("inductor"), "inductor", 5),
        (gpt2_step("cudagraphs"), "cudagraphs", 5),
    ],
    ids=["memory-bound", "gpt2-eager-bf16", "gpt2-inductor-bf16", "gpt2-cudagraphs-bf16"],
)
def test_event_step_times_agree_with_a_synchronised_reference(
    make_step: Callable[[torch.device], Step], backend: str | None, window: int
) -> None:
    """The median of the measured loop's CUDA-event step times (host HOST_LEAD_STEPS ahead) against
    the fastest of the reference's windows (`synchronised_windows_ms`): single steps where the step
    is device-bound, windows of 5 for GPT-2's steps, whose start-up after a sync is 4% of a step.
    The fastest, as timeit takes it: a window starts without the host's lead, so a delay of the
    host that the loop absorbs (its steps were launched ahead) falls on the window's device time;
    the fastest window is the steps as the device runs them when nothing holds the host up, plus a
    fifth of a start-up. The means are printed, not asserted: one slow window (48.9 ms among twelve
    of 36.5, GPT-2 eager on the H100) or one slow step moved a mean by up to 6%."""
    device = torch.device("cuda")
    step = make_step(device)
    host_ms: list[float] = []

    def host_timed() -> tuple[torch.Tensor, float]:
        start = time.perf_counter()
        out = step()
        host_ms.append((time.perf_counter() - start) * 1e3)
        return out

    for _ in range(3):  # dynamo compiles, CUDA graph trees warm up and record: every timed step replays
        step()
    events: list[float] = []
    reference: list[float] = []
    for _ in range(ROUNDS):
        records: list[StepRecord] = []
        assert run_steps(host_timed, 2, EVENT_STEPS, device, records.append, exactly(EVENT_STEPS)) == "steps"
        events += [r.step_time_ms for r in measured(records)]
        step()  # a warm step before the reference's windows, as the loop's warm-up steps
        reference += synchronised_windows_ms(step, REF_STEPS // window, window, device)
    if backend is not None:
        # The steps were compiled (and replayed as CUDA graphs): otherwise this compares eager again.
        stats = compile_stats()
        assert stats.graph_count >= 1 and stats.cudagraph_skips == 0, stats
    event_median, fastest = statistics.median(events), min(reference)
    host_median = statistics.median(host_ms)
    print(
        f"{make_step.__name__}: event median {event_median:.3f} ms, fastest synchronised window "
        f"{fastest:.3f} ms (windows of {window}; {event_median / fastest - 1:+.2%}); windows' median "
        f"{statistics.median(reference):.3f} ms; means {statistics.mean(events):.3f} and "
        f"{statistics.mean(reference):.3f} ms; events {min(events):.3f}..{max(events):.3f} ms, "
        f"windows {fastest:.3f}..{max(reference):.3f} ms; host time in the step call {host_median:.3f} ms"
    )
    assert event_median == pytest.approx(fastest, rel=EVENT_VS_SYNC_RTOL)
    if make_step is memory_step:
        # The host ran ahead: its own clock around the call saw almost nothing of the step,
        # and only the events measured the device's time.
        assert host_median < 0.1 * event_median


def test_cuda_loop_stops_from_the_reported_steps() -> None:
    """On CUDA the rule sees steps HOST_LEAD_STEPS late: the steps already launched are kept, so
    at most that many more are measured; every step's loss comes back through the ring of slots."""
    device = torch.device("cuda")
    calls = [0]

    def step() -> tuple[torch.Tensor, float]:
        torch.cuda._sleep(2_000_000)  # about a millisecond of GPU time
        calls[0] += 1
        return torch.full((), float(calls[0] - 1), device=device), 0.0

    records: list[StepRecord] = []
    rule = MeasureConfig(min_seconds=0.2, max_steps=None, max_seconds=None)
    reason = run_steps(step, 3, 5, device, records.append, rule)
    times = [r.step_time_ms / 1e3 for r in measured(records)]
    ruled = next(n for n in range(1, len(times) + 1) if math.fsum(times[:n]) >= 0.2)
    assert reason == "min_seconds" and ruled <= len(times) <= ruled + HOST_LEAD_STEPS
    assert [r.loss for r in records] == [float(r.step) for r in records] and len(records) == calls[0]
    records.clear()
    capped = MeasureConfig(min_seconds=100.0, max_steps=9, max_seconds=None)
    assert run_steps(step, 0, 5, device, records.append, capped) == "max_steps"
    assert len(records) == 9


def test_cuda_loop_does_not_run_slow_steps_past_the_rule() -> None:
    """With steps slow enough to see, the host stops launching once the steps in flight will meet
    the rule at the mean step so far (`Stopping.in_flight_suffice`): the loop measures exactly the
    steps the time rule asked for, where a host that only read the rule would have queued
    HOST_LEAD_STEPS more. `min_seconds` lies half a step past a whole number of steps (the step
    timed first), so that no rounding of the mean can move the count."""
    device = torch.device("cuda")

    def step() -> tuple[torch.Tensor, float]:
        torch.cuda._sleep(60_000_000)  # tens of milliseconds of GPU time, the same every step
        return torch.zeros((), device=device), 0.0

    probe: list[StepRecord] = []
    run_steps(step, 1, 3, device, probe.append, exactly(3))
    step_s = statistics.median(r.step_time_ms for r in measured(probe)) / 1e3
    ruled_steps = 8  # more than the 1 + HOST_LEAD_STEPS steps queued before the rule sees any
    rule = MeasureConfig(min_seconds=(ruled_steps - 0.5) * step_s, max_steps=None, max_seconds=None)
    records: list[StepRecord] = []
    reason = run_steps(step, 2, 1, device, records.append, rule)
    times = [r.step_time_ms / 1e3 for r in measured(records)]
    ruled = next(n for n in range(1, len(times) + 1) if math.fsum(times[:n]) >= rule.min_seconds)
    assert reason == "min_seconds", reason
    assert ruled > 1 + HOST_LEAD_STEPS  # else the host's lead alone could not have run past it
    assert len(times) == ruled, (ruled, len(times), step_s)


# --- 2. gradient accumulation under CUDA-graph replay equals eager ------------------------------


#: Steps of the comparison: 3 warm-up (dynamo compiles, cudagraph trees record) and 8 measured.
ACCUM_STEPS = 11
#: Measured on the H100 before this tier (examples/benchmarks/gpu_grid.py --grid accum-check, fp32,
#: 4 micro-steps): max relative loss difference to eager 0 for cudagraphs, 1.2e-7 for
#: reduce-overhead. 1e-5 leaves room for a few ulps over more steps; a gradient accumulated
#: wrongly (the last micro-step's counted twice) changes the loss by far more (see the last test).
ACCUM_LOSS_RTOL = 1e-5
#: The parameters after training, |compiled - eager| / |eager| over all of them (Euclidean norms).
ACCUM_PARAM_RTOL = 1e-5


def train_accumulating(backend: dict, keep_grads: bool = True) -> tuple[list[float], torch.Tensor, object]:
    """The tiny GPT in fp32 (no TF32) with 4 micro-steps per step, ACCUM_STEPS steps under
    `backend`: (every step's loss, all parameters flattened, dynamo's compile stats).
    `keep_grads=False` undoes the fix of workloads/cell/train.py (gradients set to None between steps)."""
    cell = prepared(backend=backend, grad_accum=4)
    step = cell.step
    if not keep_grads:
        step.keep_grads = False
        for p in step.params:
            p.grad = None
    records: list[StepRecord] = []
    run_steps(step, 3, ACCUM_STEPS - 3, cell.device, records.append, exactly(ACCUM_STEPS - 3))
    params = torch.cat([p.detach().flatten() for p in step.params]).cpu()
    return [r.loss for r in records], params, compile_stats()


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def max_rel_loss_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) == ACCUM_STEPS and all(map(math.isfinite, a + b)), (a, b)
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def eager_accumulating() -> tuple[list[float], torch.Tensor]:
    losses, params, _ = train_accumulating({"name": "eager"})
    return losses, params


@pytest.mark.parametrize(
    "backend",
    [{"name": "cudagraphs"}, {"name": "inductor", "mode": "reduce-overhead"}],
    ids=["cudagraphs", "inductor-reduce-overhead"],
)
def test_cuda_graph_gradient_accumulation_trains_as_eager(backend: dict, eager_accumulating) -> None:
    losses, params, stats = train_accumulating(backend)
    # Graphs were compiled and replayed as CUDA graphs: otherwise this compares eager with eager.
    assert stats.graph_count >= 1 and stats.cudagraph_skips == 0, stats
    eager_losses, eager_params = eager_accumulating
    loss_diff, param_diff = max_rel_loss_diff(losses, eager_losses), rel_diff(params, eager_params)
    print(f"{backend}: max relative loss difference {loss_diff:.3g}, parameters {param_diff:.3g}")
    assert loss_diff <= ACCUM_LOSS_RTOL, (losses, eager_losses)
    assert param_diff <= ACCUM_PARAM_RTOL


def test_without_kept_gradients_the_comparison_fails(eager_accumulating) -> None:
    """The fix matters, and the comparison above sees it: with gradients set to None between
    steps, autograd adopts the backward graph's output buffers as .grad and the next replay
    overwrites them (pytorch/pytorch#169545): an error, or parameters that are not eager's."""
    try:
        _, params, stats = train_accumulating({"name": "cudagraphs"}, keep_grads=False)
    except RuntimeError as err:
        assert "overwritten" in str(err), err
        return
    assert stats.graph_count >= 1 and stats.cudagraph_skips == 0, stats
    param_diff = rel_diff(params, eager_accumulating[1])
    print(f"cudagraphs without kept gradients: parameters differ from eager by {param_diff:.3g}")
    assert param_diff > 100 * ACCUM_PARAM_RTOL, (
        "torch no longer needs the kept gradients (or the test sees nothing)"
    )


# --- 3. MFU on a real GPU -------------------------------------------------------------------------


def dense_matmul_tflops(dtype: torch.dtype = torch.bfloat16, n: int = 8192, reps: int = 20) -> float:
    """What this GPU does in dense matmuls of `dtype`, TFLOP/s, timed with CUDA events."""
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    end.synchronize()
    return 2 * n**3 * reps / (start.elapsed_time(end) / 1e3) / 1e12


#: GPT-2 124M eager in bf16 measured 30.3% MFU on the H100 (docs/gpu-results.md); half of it is
#: the floor: a wrong FLOP count, a wrong peak or a slow path would fall below it.
GPT2_EAGER_MFU_FLOOR = 0.15


def test_mfu_of_gpt2_is_within_bounds(tiny_cells) -> None:
    cell = tiny_cells.get(
        "gpt",
        "eager",
        size="medium",
        precision={"name": "bf16"},
        device="cuda",
        grad_accum=1,
        steps=10,
        warmup_steps=3,
    )
    assert cell.status == "completed", cell.run["error"]
    run = cell.run
    table_peak = peak_tflops(run["gpu_name"], "bf16")
    if table_peak is None:
        pytest.skip(
            f"{run['gpu_name']} is not in the peak table (workloads/instruments/environment.py): "
            "no MFU to check"
        )
    assert run["peak_tflops"] == table_peak
    # MFU is the FLOPs of a step (nanoGPT's count) over its median time and the peak.
    assert run["mfu"] == pytest.approx(
        run["flops_per_step"] / (run["median_step_ms"] / 1e3) / 1e12 / table_peak
    )
    matmul = dense_matmul_tflops()
    achieved = run["mfu"] * table_peak
    print(
        f"{run['gpu_name']}: GPT-2 eager bf16 MFU {run['mfu']:.3f} ({achieved:.0f} TFLOP/s), "
        f"e2e {run['e2e_mfu']:.3f}; "
        f"dense bf16 matmuls {matmul:.0f} TFLOP/s of the table's {table_peak}"
    )
    assert GPT2_EAGER_MFU_FLOOR < run["mfu"] < 1 and 0 < run["e2e_mfu"] < 1
    # The table's peak bounds what the GPU does (a GPU taken for a slower one would exceed it),
    # and a training step does not outrun the GPU's own dense matmuls.
    assert 0.3 * table_peak < matmul < 1.02 * table_peak
    assert achieved < 1.05 * matmul


# --- 4. a two-GPU NCCL DDP cell -------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


#: Run as each rank's process instead of `python -m workloads.run CONFIG`: the same `main`, with one
#: more instrument in the training kind's list (workloads/kinds.py KINDS, looked up by
#: workloads.run at call time). Before the loop (the model on its GPU, DDP's broadcast of rank
#: 0's parameters done) it keeps this rank's parameters and wraps the batches to keep the first
#: one's inputs; after the loop (every step ended on the device: the copy to the host waits for it)
#: it keeps the parameters again. They go to the file named by argv[1] (torch.save). Nothing else
#: of the cell changes.
RANK_OBSERVER = """
import sys
import torch
import dataclasses
import workloads.kinds as kinds
import workloads.run as run
from workloads.instruments.base import Instrument, Instruments

out, argv = sys.argv[1], sys.argv[2:]
seen = {}

def flat(cell):
    return torch.cat([p.detach().float().flatten() for p in cell.step.params]).cpu()

def keeping_first(batches):
    x, y = next(batches)
    seen["first_inputs"] = x.cpu()
    yield x, y
    yield from batches

class RankObserver(Instrument):
    def before_loop(self, cell):
        self.cell = cell
        seen["initial"] = flat(cell)
        cell.step.batches = keeping_first(cell.step.batches)

    def after_loop(self):
        seen["final"] = flat(self.cell)
        return {}

training, *others = kinds.KINDS  # the training kind's instruments, RankObserver after them
observed = lambda cell: Instruments([*training.instruments(cell).members, RankObserver()])
kinds.KINDS = (dataclasses.replace(training, instruments=observed), *others)
code = run.main(argv)
torch.save(seen, out)
sys.exit(code)
"""


def start_rank(config: dict, cell_dir: Path, observed: Path, env: dict[str, str]) -> subprocess.Popen:
    """One rank's process of `config` (written to CELL_DIR/config.yaml), RANK_OBSERVER around
    workloads.run's main, with torch's env:// variables in `env`."""
    cell_dir.mkdir(parents=True)
    (cell_dir / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-c", RANK_OBSERVER, str(observed), str(cell_dir / "config.yaml")]
    return subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def written_cell(cell_dir: Path) -> tuple[dict, list[dict]]:
    """The run row and step rows a cell wrote, both files with exactly the contract's schema."""
    from workloads.contract.schema import RUN_SCHEMA, STEPS_SCHEMA

    for name, schema in (("steps.parquet", STEPS_SCHEMA), ("run.parquet", RUN_SCHEMA)):
        written = pq.read_schema(cell_dir / name).remove_metadata()
        assert written.equals(schema), f"{name}:\n{written}\n!=\n{schema}"
    (run,) = pq.read_table(cell_dir / "run.parquet").to_pylist()
    return run, pq.read_table(cell_dir / "steps.parquet").to_pylist()


@pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"the NCCL DDP cell needs 2 GPUs; {torch.cuda.device_count()} visible",
)
@pytest.mark.parametrize("backend", [{"name": "eager"}, {"name": "inductor"}], ids=["eager", "inductor"])
def test_two_gpu_nccl_ddp_cell(backend: dict, tmp_path: Path) -> None:
    """Two processes of one cell, each with torch's env:// variables as the orchestrator's Slurm
    job exports them: NCCL on GPUs 0 and 1, rank 0 writes both ranks' steps. min_seconds makes
    the ranks agree on a count over NCCL (one all_gather_object); bucket_cap_mb=1 gives the
    compiled cell several gradient buckets, so dynamo's DDPOptimizer splits its graph.

    Data parallel means the ranks' replicas stay one model: each rank trains on samples of its
    own, DDP all-reduces the gradients, and the same optimizer step on the same gradients keeps
    the parameters equal, bit for bit (the all-reduce hands every rank the same sum). The cell's
    files record nothing of the parameters, so each rank runs workloads.run's own main under
    RANK_OBSERVER, which saves its parameters after the cell is built and after its last step,
    and its first batch. The test asserts that the ranks' first batches differ, that both
    started from the same parameters and moved away from them, and that they ended equal: ranks
    that trained alone (no DDP, or gradients never all-reduced) would each follow their own
    batches and end with parameters of their own."""
    config = gpu_config(
        size="small",
        precision={"name": "bf16"},
        backend=backend,
        steps=10,
        measure={"min_seconds": 2.0},
        distributed={"tasks_per_node": 2, "bucket_cap_mb": 1},
    )
    launch = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    # Rank 1 reads its own copy of the config (it writes nothing); rank 0 writes the cell.
    observed = [tmp_path / f"observed.rank{rank}.pt" for rank in range(2)]
    procs = [
        start_rank(
            config,
            tmp_path / ("cell" if rank == 0 else "rank1"),
            observed[rank],
            {**launch, "RANK": str(rank), "LOCAL_RANK": str(rank)},
        )
        for rank in range(2)
    ]
    with ThreadPoolExecutor(2) as pool:  # both at once: a rank blocked on a full pipe would stall the other
        outputs = list(pool.map(lambda proc: proc.communicate(timeout=400), procs))
    for rank, (proc, (_, err)) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank}:\n{err[-3000:]}"
    run, steps = written_cell(tmp_path / "cell")
    assert (run["status"], run["world_size"], run["dist_backend"], run["device"]) == (
        "completed",
        2,
        "nccl",
        "cuda:0",
    )
    assert run["items_per_step"] == 2 * 64 * 256  # both ranks' tokens
    assert run["stop_reason"] == "min_seconds" and run["measured_steps"] > config["steps"]
    assert len(run["rank_median_step_ms"]) == 2 and min(run["rank_median_step_ms"]) > 0
    assert min(run["rank_peak_mem_bytes"]) > 0  # each rank's own GPU memory
    assert run["mfu"] == pytest.approx(
        run["flops_per_step"] / (run["median_step_ms"] / 1e3) / 1e12 / (2 * run["peak_tflops"])
    )
    losses = [s["loss"] for s in steps if s["phase"] == "measure"]
    assert len(losses) == run["measured_steps"] and all(map(math.isfinite, losses))
    assert all(
        len(s["rank_step_time_ms"]) == 2 and s["step_time_ms"] == max(s["rank_step_time_ms"]) for s in steps
    )
    if backend["name"] == "inductor":
        assert run["graph_count"] >= 1 and run["ddp_graph_splits"] >= 1
    # Each rank reads its own GPU's counter over the window; the cell's energy is their sum, and
    # its mean power stays under both boards' limits together.
    ranks_j = run["rank_energy_j"]
    print(f"{backend['name']} DDP energy: {ranks_j} J, {run['avg_power_w']:.0f} W for both GPUs")
    assert len(ranks_j) == 2 and min(ranks_j) > 0
    assert run["energy_j"] == pytest.approx(sum(ranks_j))
    assert run["avg_power_w"] == pytest.approx(run["energy_j"] / run["energy_window_s"])
    assert 0 < run["avg_power_w"] <= 2 * run["gpu_power_limit_w"] * 1.05

    rank0, rank1 = (torch.load(path) for path in observed)
    moved, apart = rel_diff(rank0["final"], rank0["initial"]), rel_diff(rank1["final"], rank0["final"])
    print(
        f"{backend['name']} DDP: {run['measured_steps']} measured steps; parameters moved by {moved:.3g} "
        f"(relative norm), rank 1's differ from rank 0's by {apart:.3g}"
    )
    assert not torch.equal(rank0["first_inputs"], rank1["first_inputs"])  # each rank its own samples
    assert torch.equal(rank0["initial"], rank1["initial"]) and moved > 0
    assert torch.equal(rank0["final"], rank1["final"]), (
        f"the ranks' parameters differ by {apart:.3g} after training"
    )


# --- 5. not_compiled on a GPU ---------------------------------------------------------------------


def test_cudagraphs_with_compile_disabled_is_not_compiled(tmp_path: Path, workloads_cli) -> None:
    """TORCH_COMPILE_DISABLE=1 (read when torch is imported: a fresh process): the steps run
    eagerly on the GPU, and the cell says so instead of passing them off as CUDA graphs."""
    cli = workloads_cli(
        gpu_config(backend={"name": "cudagraphs"}), tmp_path / "cell", env={"TORCH_COMPILE_DISABLE": "1"}
    )
    assert cli.proc.returncode == 1, cli.proc.stderr[-3000:]
    run = cli.cell.run
    assert (run["status"], run["graph_count"], run["device"]) == ("not_compiled", 0, "cuda:0")
    assert "no graph was compiled" in run["error"]


class TinyClassifier(nn.Module):
    """A timm-registered image classifier; `cpu_op` adds a statistic copied to the host and back
    inside forward, as a model that logs a value from there does: a CPU node in the graph."""

    def __init__(self, num_classes: int = 1000, cpu_op: bool = False, **kwargs: object):
        super().__init__()
        self.cpu_op = cpu_op
        self.conv = nn.Conv2d(3, 16, 3, stride=2)
        self.head = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(torch.relu(self.conv(x)).mean((2, 3)))
        if self.cpu_op:
            logits = logits + 0 * logits.detach().mean().cpu().to(logits.device)
        return logits


@pytest.fixture(scope="module")
def timm_models() -> dict[bool, str]:
    """{cpu_op: model name}: TinyClassifier with and without the CPU op, in timm's registry of
    this process (the cells run here, through `model=timm model.arch=NAME`)."""
    import timm
    from timm.models import register_model

    names = {False: "compilebench_gpu_tier_plain", True: "compilebench_gpu_tier_cpu_op"}
    for cpu_op, name in names.items():
        if name not in timm.list_models():

            def create(pretrained: bool = False, cpu_op: bool = cpu_op, **kwargs: object) -> nn.Module:
                return TinyClassifier(cpu_op=cpu_op, **kwargs)

            create.__name__ = name
            register_model(create)
    return names


@pytest.mark.parametrize(
    "cpu_op, status",
    [(False, "completed"), (True, "not_compiled")],
    ids=["no-cpu-op-completes", "cpu-op-is-not-compiled"],
)
def test_cudagraphs_skipped_for_a_cpu_op_is_not_compiled(
    cpu_op: bool, status: str, timm_models, tiny_cells
) -> None:
    cell = tiny_cells.get("timm", "cudagraphs", model={"arch": timm_models[cpu_op]}, device="cuda")
    run = cell.run
    assert cell.status == run["status"] == status, run["error"]
    assert run["graph_count"] >= 1  # dynamo compiled: only the CUDA graphs were skipped
    if cpu_op:
        assert run["cudagraph_skips"] >= 1 and "asked for CUDA graphs" in run["error"]
    else:
        assert run["cudagraph_skips"] == 0 and run["error"] is None


# --- 6. a CUDA OOM cell, and the next cell of the same local sweep ------------------------------


@dataclass(frozen=True)
class SweepCell:
    """What orchestrator.executors.local.run_replicates reads of a cell of orchestrator.grid.cells."""

    cell_id: str
    label: str
    repeats: int = 1
    auto: bool = False


@dataclass
class LocalSweep:
    """What the test reads of orchestrator.grid.cells.Grid: the cells (one replicate each, in order), the
    sweep directory whose cells/<id>/config.yaml they run, and the cluster profile's compile cache."""

    cells: list[SweepCell]
    sweep_dir: Path
    cluster: dict

    def replicates(self) -> list[tuple[SweepCell, int]]:
        return [(cell, 0) for cell in self.cells]


def test_a_cuda_oom_cell_records_oom_and_the_next_cell_runs(tmp_path: Path) -> None:
    """A local sweep (cluster=local: orchestrator.executors.local.run_replicates, Hydra's expansion
    aside) of two cells of GPT-2 124M, eager bf16: the first with a batch whose logits alone (batch x 1024
    tokens x 50304 bf16 values) need more than the GPU's whole memory, then the same model at
    nanoGPT's batch of 12. The executor starts the second cell's process while the first runs (it
    imports and makes its CUDA context, then waits for its turn). The first records `oom` with
    CUDA's message; the second gets the device when the first has handed it over and completes
    all its steps on the GPU."""
    from orchestrator.executors.local import run_replicates
    from workloads.contract.sweep_dir import config_path
    from workloads.models.gpt import GPT_SIZES

    gc.collect()
    torch.cuda.empty_cache()  # this process's cached blocks from the tests before: not the cells' memory
    gpt2 = GPT_SIZES["medium"]
    logits_per_sample = gpt2.block_size * gpt2.vocab_size * 2
    too_large = math.ceil(torch.cuda.get_device_properties(0).total_memory / logits_per_sample)
    cells = {
        "oom": gpu_config(size="medium", precision={"name": "bf16"}, grad_accum=1, batch_size=too_large),
        "next": gpu_config(size="medium", precision={"name": "bf16"}, grad_accum=1),
    }
    sweep = LocalSweep(
        [SweepCell(name, f"gpt/medium/eager/bf16 {name}") for name in cells],
        tmp_path / "sweep",
        {"executor": "local", "compile_cache": "per_job"},
    )
    for name, config in cells.items():
        path = config_path(sweep.sweep_dir, name)
        path.parent.mkdir(parents=True)
        path.write_text(yaml.safe_dump({**config, "cell_id": name}))
    progress = io.StringIO()
    outcomes = run_replicates(sweep.sweep_dir, sweep.replicates(), sweep.cluster["compile_cache"], progress)
    print(f"batch {too_large}:\n{progress.getvalue()}", end="")
    assert [(o.cell_id, o.status) for o in outcomes] == [("oom", "oom"), ("next", "completed")], (
        progress.getvalue()
    )

    oom, _ = written_cell(sweep.sweep_dir / "cells" / "oom")
    assert oom["status"] == "oom" and "CUDA out of memory" in oom["error"], oom["error"]
    assert oom["batch_size"] == too_large and oom["device"] == "cuda:0"
    run, steps = written_cell(sweep.sweep_dir / "cells" / "next")
    assert (run["status"], run["device"], run["batch_size"], run["measured_steps"]) == (
        "completed",
        "cuda:0",
        12,
        8,
    )
    assert all(math.isfinite(s["loss"]) for s in steps) and len(steps) == 3 + 8
    # One cell on the device at a time: the second began once the first had written its result,
    # and its process had been started before that, while the first filled the GPU.
    assert run["started_at"] >= oom["finished_at"]
    log = (sweep.sweep_dir / "cells" / "next" / "logs" / "stderr.log").read_text()
    started = re.search(r"process started at (\S+),", log)
    assert started and datetime.fromisoformat(started[1]) < oom["finished_at"], log[-3000:]


# --- 7. Paired cells on a GPU ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["inductor", "cudagraphs"])
def test_a_paired_cell_times_its_own_eager_side_on_the_gpu(tiny_cells, backend: str) -> None:
    """A paired cell of the tiny GPT (fp32, launch-bound on any GPU: dozens of small kernels a
    step) alternates compiled and force_eager blocks on the GPU. Both sides are written block by
    block; switching the stance recompiles nothing; and the eager side really runs eagerly (were
    force_eager ignored, the two sides would be one compiled step and the ratios would scatter around
    1): under CUDA graphs every pair's compiled block is faster than its eager one (1.84-2.21x on the
    H100), under inductor the median pair (0.98-1.23x, median 1.11x: fusion gains less on the
    tiny model, and a pair can lose to the host's noise)."""
    cell = tiny_cells.get(
        "gpt", backend, device="cuda", warmup_steps=3, measure={"paired": True, "min_seconds": 1.0}
    )
    run = cell.run
    assert (run["status"], run["paired"], run["paired_fallback"]) == ("completed", True, None), run["error"]
    assert run["recompile_count"] == 0 and run["graph_count"] >= 1
    measured = [s for s in cell.steps if s["phase"] == "measure"]
    blocks: dict[tuple[int, str], list[float]] = {}
    for s in measured:
        blocks.setdefault((s["pair"], s["side"]), []).append(s["step_time_ms"])
    pairs = sorted({pair for pair, _ in blocks})
    assert pairs == list(range(len(pairs))) and len(pairs) >= 6
    sizes = {len(times) for times in blocks.values()}
    assert len(sizes) == 1 and len(blocks) == 2 * len(pairs)  # one block of each side per pair, all K
    ratios = [
        statistics.median(blocks[pair, "eager"]) / statistics.median(blocks[pair, "compiled"])
        for pair in pairs
    ]
    print(
        f"{backend}: {len(pairs)} pairs of {sizes.pop()} steps, ratios {min(ratios):.2f}..{max(ratios):.2f}"
    )
    assert (min(ratios) if backend == "cudagraphs" else statistics.median(ratios)) > 1, ratios
    assert all(math.isfinite(s["loss"]) for s in measured)


def test_side_peaks_keep_each_sides_own_peak_memory() -> None:
    """workloads/cell/paired.py SidePeaks with real allocations: a side's peak is the most memory
    allocated while it ran, the largest over its blocks; memory held across a switch counts on both
    sides, as weights and optimizer state do."""
    from workloads.cell.paired import SidePeaks

    device, mib = torch.device("cuda"), 2**20

    def burst(size_mib: int) -> None:
        """Allocate `size_mib` MiB and free them again."""
        torch.empty(size_mib * mib, dtype=torch.uint8, device=device)

    gc.collect()
    torch.cuda.reset_peak_memory_stats(device)  # as prepare_cell does once the cell is built
    base = torch.cuda.memory_allocated(device)
    peaks = SidePeaks(device)
    burst(256)  # the compiled side first: compile and warm-up
    peaks.switch("eager")
    held = torch.empty(64 * mib, dtype=torch.uint8, device=device)  # kept across the switches below
    burst(1024)
    assert peaks.peak("eager") == pytest.approx(base + 1088 * mib, abs=mib)  # its block so far
    peaks.switch("compiled")
    burst(512)
    peaks.switch("eager")
    burst(256)
    peaks.switch("compiled")
    del held
    # (the caching allocator leaves a block whole where less than 1 MiB would remain: at most 1 MiB more)
    assert peaks.peak("compiled") == pytest.approx(base + 576 * mib, abs=mib)  # 64 held + its 512
    assert peaks.peak("eager") == pytest.approx(base + 1088 * mib, abs=mib)  # its larger block


#: How far a paired cell's peak memory of a side may be from the unpaired cell's of that side.
SIDE_PEAK_RTOL = 0.02


def test_a_paired_gpt2_cells_memory_is_each_sides_own(tmp_path: Path, workloads_cli_start) -> None:
    """GPT-2 124M (bf16, one micro-step), each cell in a process of its own, all three at once (a
    process's peak is its own): the paired inductor cell's peak (its compiled side's) is within 2%
    of the unpaired inductor cell's and below the eager cell's, and its eager side's is within 2% of
    the eager cell's. Before issue 38 the paired cell's peak was its eager side's (11.31 GiB, the
    unpaired cell's 7.24 on the H100)."""
    gpt2 = {"size": "medium", "precision": {"name": "bf16"}, "grad_accum": 1, "steps": 10, "warmup_steps": 3}
    blocks = {"paired": True, "min_seconds": 0.0, "block_steps": 5, "block_seconds": 0.0}
    configs = {
        "eager": gpu_config(**gpt2, backend={"name": "eager"}),
        "unpaired": gpu_config(**gpt2, backend={"name": "inductor"}),
        "paired": gpu_config(**gpt2, backend={"name": "inductor"}, measure=blocks),
    }
    started = {name: workloads_cli_start(config, tmp_path / name) for name, config in configs.items()}
    runs = {}
    for name, (proc, cell) in started.items():
        _, stderr = proc.communicate(timeout=540)
        assert proc.returncode == 0, f"{name}: {stderr[-3000:]}"
        runs[name] = cell.run
    eager, unpaired, paired = runs["eager"], runs["unpaired"], runs["paired"]
    gib = {name: run["peak_mem_bytes"] / 2**30 for name, run in runs.items()}
    print(
        f"peak GiB: eager {gib['eager']:.2f}, inductor unpaired {gib['unpaired']:.2f}, paired "
        f"{gib['paired']:.2f} (its eager side {paired['eager_peak_mem_bytes'] / 2**30:.2f})"
    )
    assert (paired["paired"], unpaired["paired"]) == (True, False), paired["paired_fallback"]
    assert eager["eager_peak_mem_bytes"] is None and unpaired["eager_peak_mem_bytes"] is None
    assert paired["peak_mem_bytes"] == pytest.approx(unpaired["peak_mem_bytes"], rel=SIDE_PEAK_RTOL)
    assert max(paired["peak_mem_bytes"], unpaired["peak_mem_bytes"]) < eager["peak_mem_bytes"]
    assert paired["eager_peak_mem_bytes"] == pytest.approx(eager["peak_mem_bytes"], rel=SIDE_PEAK_RTOL)


# --- the GPU's provenance -------------------------------------------------------------------------


def test_a_real_gpu_is_described() -> None:
    from workloads.instruments.provenance import finish, start

    row = start("cuda")
    torch.ones(1, device="cuda").sum().item()  # this process now holds a context: not an "other"
    row = finish("cuda", row)
    assert row["gpu_driver"] and row["gpu_max_sm_clock_mhz"] and row["gpu_temp_end_c"] is not None
    assert row["gpu_sm_clock_mhz"] and row["gpu_mem_clock_mhz"] and row["gpu_power_limit_w"]
    from workloads.instruments.host_load import op_overhead_us

    assert 0 < op_overhead_us("cuda") < 1000  # a launch costs microseconds


def test_inductors_compile_workers_are_found_and_measured_idle() -> None:
    """On a GPU, inductor starts its compile-worker pool (a side process that runs
    torch/_inductor/compile_worker/__main__.py, and the workers it forks): the cell finds it by that
    path, waits until it is idle, and over a window of steps after that finds it idle. (If torch moved
    it, no worker would be found, and a warm-cache cell would measure beside its import again.)"""
    from workloads.instruments.compile_workers import IDLE_CPUS, CompileWorkersIdle, compile_workers_cpu_s

    step = torch.compile(lambda x: (x.sin() + 1).relu().sum(), backend="inductor")
    x = torch.randn(4096, device="cuda")
    step(x).item()
    assert compile_workers_cpu_s(os.getpid()), "no compile worker of inductor's found"
    instrument = CompileWorkersIdle()
    instrument.before_measuring()
    for _ in range(10_000):  # about 0.3-0.5 s of launches: a 10 ms clock tick is a small part of it
        step(x)
    synchronize(torch.device("cuda"))
    row = instrument.after_loop()
    assert row["compile_workers_wait_s"] >= 0 and row["compile_workers_cpus"] <= IDLE_CPUS, row


def test_a_cuda_replicate_started_ahead_starts_its_compile_workers_while_it_waits(
    tiny_config, tmp_path: Path
) -> None:
    """workloads/run.py `take_turn`: a CUDA inductor cell started ahead by the local executor starts
    inductor's compile workers before it builds anything, and is done importing only once they have
    imported torch; so it need not wait for them before measuring."""
    workers, cpu_s = take_turn_ahead(tiny_config("gpt", "inductor", device="cuda"), tmp_path)
    assert workers >= 1 and cpu_s >= 0.2


# --- the GPU's busy share -------------------------------------------------------------------------


def tiny_ops_step(device: torch.device) -> Step:
    """A launch-bound step: 200 in-place adds on one element, each a kernel far shorter than its launch."""
    x = torch.zeros(1, device=device)

    def step() -> tuple[torch.Tensor, float]:
        for _ in range(200):
            x.add_(1.0)
        return x, 0.0

    return step


def matmul_step(device: torch.device) -> Step:
    """A GPU-bound step: four 8192² bf16 matmuls, each long beside its launch."""
    a, b = (torch.randn(8192, 8192, device=device, dtype=torch.bfloat16) for _ in range(2))

    def step() -> tuple[torch.Tensor, float]:
        for _ in range(4):
            out = a @ b
        return out[0, 0], 0.0

    return step


def test_a_launch_bound_step_is_labelled_so_and_a_matmul_bound_one_is_not() -> None:
    """The two extremes on either side of the label's threshold (LAUNCH_BOUND: the measured step's share
    the GPU idled, 1 - GPU time / measured step)."""
    from analysis.cells.device_time import LAUNCH_BOUND
    from workloads.cell.step_timer import step_timer
    from workloads.instruments.profiled_window import MIN_STEPS, WINDOWS, profiled_windows

    device = torch.device("cuda")
    idle = {}
    for name, step in (("tiny ops", tiny_ops_step(device)), ("matmuls", matmul_step(device))):
        windows = profiled_windows(step, device, MIN_STEPS, WINDOWS)
        assert windows is not None, "the profiler saw no kernels (CUPTI unavailable?)"
        measured = statistics.median(one.step_ms for one in step_timer(device).block(step, 10))
        idle[name] = 1 - statistics.median(w.gpu_ms for w in windows) / measured
        print(f"{name}: measured {measured:.3f} ms a step, the GPU idle {idle[name]:.1%} of it")
    assert idle["matmuls"] < LAUNCH_BOUND < idle["tiny ops"] < 1


def slowed(step: Step, host_us: float) -> Step:
    """`step` with the host held `host_us` µs before it (a slower host's Python, as a busy wait)."""

    def slow() -> tuple[torch.Tensor, float]:
        until = time.perf_counter() + host_us / 1e6
        while time.perf_counter() < until:
            pass
        return step()

    return slow


def test_a_window_s_gpu_time_and_launches_are_the_device_s_not_the_host_s() -> None:
    """Item 1 of issue 39: the tiny ops' GPU time per step and their launches (one per add) do not move
    when the host is 2 ms slower per step, where the window's span per step does; a matmul-bound step's
    GPU time is its window's whole span. Not against a step measured at another moment: four 8192²
    matmuls, bound by the board's power, took 5.5 to 6.3 ms a step between runs on one H100 kind."""
    from workloads.cell.step_timer import step_timer
    from workloads.instruments.profiled_window import WINDOWS, profiled_windows

    def profiled_window(step: Step, device: torch.device, steps: int):
        windows = profiled_windows(step, device, steps, WINDOWS)
        assert windows is None or len(windows) == WINDOWS
        return windows[-1] if windows else None

    device = torch.device("cuda")
    tiny = tiny_ops_step(device)
    fast, slow = (profiled_window(step, device, 10) for step in (tiny, slowed(tiny, 2000)))
    assert fast is not None and slow is not None, "the profiler saw no kernels (CUPTI unavailable?)"
    print(f"tiny ops: GPU {fast.gpu_ms:.4f} / {slow.gpu_ms:.4f} ms a step, span {fast.step_ms:.3f} / "
          f"{slow.step_ms:.3f} ms, launches {fast.launches} / {slow.launches}, "
          f"kernels {fast.kernels}")  # fmt: skip
    assert fast.launches == slow.launches == fast.kernels == 200
    assert slow.gpu_ms == pytest.approx(fast.gpu_ms, rel=0.1) and slow.step_ms > fast.step_ms + 1.0
    dense = profiled_window(matmul_step(device), device, 5)
    print(f"matmuls: GPU {dense.gpu_ms:.3f} ms a step, span {dense.step_ms:.3f} ms, "
          f"launches {dense.launches}")  # fmt: skip
    assert dense.gpu_ms == pytest.approx(dense.step_ms, rel=0.05) and dense.kernels == 4
    assert dense.launches >= 4  # cuBLAS may fill its workspace: a memset is a launch too
    # The loop's host time per step (step_timer): the slowed step's 2 ms more, give or take the host's.
    host = {name: statistics.median(one.host_ms for one in step_timer(device).block(step, 20))
            for name, step in (("fast", tiny), ("slow", slowed(tiny, 2000)))}  # fmt: skip
    print(f"host ms a step: {host}")
    assert host["slow"] > host["fast"] + 1.0, host


def test_a_cuda_graph_s_replay_is_one_launch_of_all_its_kernels() -> None:
    """CUPTI gives a graph's kernels the correlation id of its replay: one launch, 200 kernels."""
    from workloads.instruments.profiled_window import profiled_windows

    device = torch.device("cuda")
    tiny, stream = tiny_ops_step(device), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        tiny()  # warm up on a side stream, as capture requires
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tiny()
    (window,) = profiled_windows(lambda: (graph.replay(), 0.0), device, 10, 1)
    assert window.launches == 1 and window.kernels == 200


def test_cells_record_each_side_s_gpu_time_launches_and_host_time_also_under_cuda_graphs(tiny_cells) -> None:
    """An eager cell's columns, and a paired cudagraphs cell's of both sides: the replayed kernels are
    seen (GPU time above 0), a compiled step makes fewer launches than it runs kernels where its eager
    side makes one per kernel or more (copies and fills are launches too), and replaying the tiny GPT's
    kernels keeps the GPU busier than launching them one by one."""
    from workloads.instruments.profiled_window import MIN_STEPS, WINDOWS

    eager = tiny_cells.get("gpt", "eager", device="cuda").run
    graphs = tiny_cells.get("gpt", "cudagraphs", device="cuda", measure={"paired": True}).run
    assert graphs["paired"], graphs["paired_fallback"]
    for run in (eager, graphs):
        assert run["status"] == "completed", run["error"]
        assert 0 < run["gpu_busy_share"] <= 1 and run["profiled_steps"] >= MIN_STEPS
        assert run["device_windows"] == WINDOWS == len(run["gpu_ms_windows"])
        assert 0 < run["gpu_ms_per_step"] <= run["profiled_step_ms"] and run["host_ms_per_step"] > 0
        assert run["profile_s"] > 0 and run["kernels_per_step"] > 0
    assert eager["eager_gpu_ms_per_step"] is None and eager["launches_per_step"] >= eager["kernels_per_step"]
    print({k: v for k, v in graphs.items() if "launches" in k or "kernels" in k or "gpu_ms_per" in k})
    assert graphs["launches_per_step"] < graphs["kernels_per_step"] / 2
    assert graphs["eager_host_ms_per_step"] > 0  # the eager side's measured steps' host time
    assert graphs["eager_launches_per_step"] >= graphs["eager_kernels_per_step"] > 0
    assert 0 < graphs["eager_gpu_busy_share"] < graphs["gpu_busy_share"]


# --- the accuracy check on a GPU ------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend",
    [{"name": "inductor"}, {"name": "cudagraphs"}, {"name": "inductor", "mode": "reduce-overhead"}],
    ids=["inductor", "cudagraphs", "inductor-reduce-overhead"],
)
def test_compiled_cells_pass_the_accuracy_check(backend: dict, tmp_path: Path) -> None:
    """bf16, dropout (off for the check) and gradient accumulation under CUDA graphs: the compiled
    losses within the limit of eager's, and eager's rerun within the precision's tolerance (CUDA's
    atomic adds may move it)."""
    from workloads.run import run_cell

    config = gpu_config(
        backend=backend, precision={"name": "bf16"}, model={"name": "gpt", "dropout": 0.2}, grad_accum=2
    )
    status = run_cell(cell_config_from_dict(config), tmp_path / "cell")
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    print(
        f"{backend}: {run['accuracy']} rel diff {run['accuracy_rel_diff']:.3g}, eager's own "
        f"{run['accuracy_noise_floor']:.3g}, limit {run['accuracy_tolerance']:.3g}, {run['accuracy_s']:.1f} s"
    )
    assert status == "completed", run["error"]
    assert run["accuracy"] == "pass", run["accuracy_error"]
    # The pass was not bought by a noisy eager: its rerun alone stays within the precision's tolerance.
    assert run["accuracy_noise_floor"] < PRECISIONS["bf16"].accuracy_tolerance


def test_a_gpt2_bf16_inductor_cell_passes_the_accuracy_check_tensor_by_tensor(tmp_path: Path) -> None:
    """GPT-2 124M in bf16 under inductor: every loss, gradient and updated parameter within its limit
    against an fp64 copy of the model (it fits beside the cell), the worst tensor named with its limit:
    bf16's tolerance or 3x eager's own error against fp64."""
    from workloads.run import run_cell

    config = gpu_config(size="small", precision={"name": "bf16"}, backend={"name": "inductor"}, steps=3)
    status = run_cell(cell_config_from_dict(config), tmp_path / "cell")
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    print(
        f"gpt small bf16 inductor: {run['accuracy']}, worst {run['accuracy_worst_tensor']} "
        f"{run['accuracy_rel_diff']:.3g} (limit {run['accuracy_tolerance']:.3g}, eager's own "
        f"{run['accuracy_noise_floor']:.3g}) against {run['accuracy_reference']}, {run['accuracy_s']:.1f} s"
    )
    assert status == "completed", run["error"]
    assert run["accuracy"] == "pass", (run["accuracy_worst_tensor"], run["accuracy_error"])
    assert run["accuracy_reference"] == "fp64" and run["accuracy_worst_tensor"]
    limit = max(PRECISIONS["bf16"].accuracy_tolerance, 3 * run["accuracy_noise_floor"])
    assert run["accuracy_tolerance"] == limit and 0 < run["accuracy_rel_diff"] <= limit


# --- precision=fp8: torchao's float8 training (workloads/cell/fp8.py) -----------------------------

needs_fp8 = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
    reason="precision=fp8 needs fp8 tensor cores (compute capability >= 8.9: H100, H200, L4, L40)",
)


def fp8_cell(backend: dict, recipe: str, cell_dir: Path) -> tuple[str, dict, list[dict]]:
    """A tiny GPT (its blocks' Linears 16-aligned, lm_head 65 wide) trained in fp8: status, run row, steps."""
    pytest.importorskip("torchao", reason="precision=fp8 needs the extra: pip install 'compilebench[fp8]'")
    from workloads.run import run_cell

    config = gpu_config(backend=backend, precision={"name": "fp8", "recipe": recipe})
    status = run_cell(cell_config_from_dict(config), cell_dir)
    run = pq.read_table(cell_dir / "run.parquet").to_pylist()[-1]
    return status, run, pq.read_table(cell_dir / "steps.parquet").to_pylist()


@needs_fp8
@pytest.mark.parametrize(
    ("backend", "recipe"),
    [
        ({"name": "eager"}, "tensorwise"),
        ({"name": "inductor"}, "tensorwise"),
        ({"name": "inductor"}, "rowwise"),
    ],
    ids=["eager-tensorwise", "inductor-tensorwise", "inductor-rowwise"],
)
def test_an_fp8_cell_trains_its_linears_in_fp8(backend: dict, recipe: str, tmp_path: Path) -> None:
    status, run, steps = fp8_cell(backend, recipe, tmp_path / "cell")
    assert status == "completed", run["error"]
    # 2 blocks x (c_attn, attn c_proj, c_fc, mlp c_proj); lm_head is the output head (and 65 wide).
    assert (run["fp8_linears"], run["fp8_skipped_head"], run["fp8_skipped_misaligned"]) == (8, 1, 0)
    assert steps and all(math.isfinite(step["loss"]) for step in steps)
    assert run["peak_tflops"] == peak_tflops(run["gpu_name"], "fp8") and run["mfu"] > 0


@needs_fp8
def test_an_inductor_fp8_cell_passes_the_accuracy_check(tmp_path: Path) -> None:
    """Inductor's fp8 casts and scales against eager's, on the same batches and state."""
    status, run, _ = fp8_cell({"name": "inductor"}, "tensorwise", tmp_path / "cell")
    print(
        f"fp8 inductor: {run['accuracy']} rel diff {run['accuracy_rel_diff']}, eager's own "
        f"{run['accuracy_noise_floor']}, limit {run['accuracy_tolerance']}"
    )
    assert status == "completed", run["error"]
    assert run["accuracy"] == "pass", run["accuracy_error"]


# --- the GEMM cell (model=gemm) on a GPU ---------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "backend"),
    [
        ({"name": "fp8"}, {"name": "eager"}),
        ({"name": "fp8"}, {"name": "inductor", "mode": "max-autotune-no-cudagraphs"}),
        ({"name": "fp8", "recipe": "rowwise"}, {"name": "eager"}),
        ({"name": "bf16"}, {"name": "eager"}),
        ({"name": "bf16"}, {"name": "inductor", "mode": "max-autotune-no-cudagraphs"}),
    ],
    ids=["fp8-cublas", "fp8-autotuned", "fp8-rowwise-cublas", "bf16-cublas", "bf16-autotuned"],
)
def test_gemm_cells_time_their_gemm_within_the_roofline(
    precision: dict, backend: dict, tmp_path: Path
) -> None:
    """The post's shape (M = 16, N = K = 8192) as CUDA-graph replays: a time per GEMM no faster
    than the roofline allows, and the kernel that ran named (inductor's autotuned choice with its
    own timing). Skipped for fp8 on a GPU without fp8 tensor cores (recorded as not_supported)."""
    from tests.helpers import gemm_config
    from workloads.run import run_cell

    config = gemm_config("cuda", size="small", precision=precision, backend=backend, steps=20)
    status = run_cell(cell_config_from_dict(config), tmp_path / "cell")
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    if status == "not_supported":
        pytest.skip(run["error"])
    print(
        f"{precision} {backend}: {run['gemm_us']:.1f} µs per GEMM, floor {run['gemm_floor_us']}, "
        f"{run['gemm_gbps']:.0f} GB/s, kernel {run['gemm_kernel']} (autotuner {run['gemm_autotune_us']} µs)"
    )
    assert status == "completed", run["error"]
    assert run["gemm_us"] > 0 and run["gemm_bound"] == "memory"
    if run["gemm_floor_us"] is not None:  # a GPU of the project's peak tables
        assert 0 < run["gemm_roofline_share"] <= 1
    assert run["gemm_kernel"]
    if backend["name"] == "eager":
        assert run["gemm_kernel"] == "cublas" and run["gemm_autotune_us"] is None
    else:
        assert run["gemm_autotune_us"] > 0 and run["graph_count"] == 1


def test_a_gemm_cell_measures_its_joules_per_gemm(tmp_path: Path) -> None:
    """A bf16 cuBLAS GEMM (M = 16, N = K = 8192) for 5 s (`max_steps` lifted: on the H100 the default
    5,000 of its 0.5 ms steps ended the window at 2.4 s): its energy per GEMM is the window's energy
    over the GEMMs the window ran (GEMMS_PER_REPLAY per step row), the window covers their time, and
    its mean power lies below the board's limit."""
    from tests.helpers import gemm_config
    from workloads.gemm.timing import GEMMS_PER_REPLAY
    from workloads.instruments.energy import window_start
    from workloads.run import run_cell

    config = gemm_config("cuda", size="small", steps=20, measure={"min_seconds": 5.0, "max_steps": 100_000})
    status = run_cell(cell_config_from_dict(config), tmp_path / "cell")
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    steps = sorted(pq.read_table(tmp_path / "cell" / "steps.parquet").to_pylist(), key=lambda s: s["step"])
    assert status == "completed", run["error"]
    if run["energy_j"] is None:
        pytest.skip(f"{run['gpu_name']}: no energy counter (a GPU before Volta, or a MIG instance)")
    window = steps[window_start([s["phase"] for s in steps]) :]
    gemms_s = sum(s["step_time_ms"] for s in window) * GEMMS_PER_REPLAY / 1e3
    watts = {name: run[f"{name}_w"] for name in ("avg_power", "idle_power", "gpu_power_limit")}
    print(f"{run['joules_per_step'] * 1e3:.2f} mJ per GEMM of {run['gemm_us']:.1f} µs; W: {watts}")
    assert run["energy_window_steps"] == len(window)
    assert run["joules_per_step"] == pytest.approx(run["energy_j"] / (len(window) * GEMMS_PER_REPLAY))
    assert gemms_s <= run["energy_window_s"] and run["energy_window_s"] >= 5.0
    assert 0 < run["avg_power_w"] <= run["gpu_power_limit_w"] * 1.05
    assert run["items_per_joule"] == pytest.approx(1 / run["joules_per_step"])


@pytest.mark.parametrize("timing", ["sustained", "burst"])
def test_a_gemm_cell_records_its_clocks_in_either_timing(timing: str, tmp_path: Path) -> None:
    """An fp8 cuBLAS GEMM (M = 4096, N = K = 8192: compute-bound, the shape whose sustained time the
    power cap moved most in issue 40; bf16 on a GPU without fp8) timed each way: the mode recorded, a
    plausible SM clock (above 100 MHz, at most the GPU's maximum) from NVML samples taken while GEMMs
    ran (a sustained cell's at most every 10 ms; a burst cell's one per burst), the clock limits a
    string of NVML's reason names or `none`; a burst cell's rows are its 20 bursts, without energy."""
    from tests.helpers import gemm_config
    from workloads.contract.vocabulary import NO_CLOCK_LIMITS
    from workloads.gemm.timing import GEMMS_PER_REPLAY
    from workloads.instruments.gpu_clocks import CLOCK_LIMITS
    from workloads.run import run_cell

    fp8 = torch.cuda.get_device_capability() >= (8, 9)
    precision = {"name": "fp8", "recipe": "tensorwise"} if fp8 else {"name": "bf16"}
    config = gemm_config("cuda", size="small", precision=precision, steps=20, measure={"min_seconds": 3.0},
                         gemm={"m": 4096, "timing": timing})  # fmt: skip
    status = run_cell(cell_config_from_dict(config), tmp_path / "cell")
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    steps = pq.read_table(tmp_path / "cell" / "steps.parquet").to_pylist()
    print(f"{timing} {precision['name']}: {run['gemm_us']} µs per GEMM at {run['sm_clock_mhz']} MHz "
          f"({run['clock_samples']} samples; max {run['gpu_max_sm_clock_mhz']}), "
          f"limits {run['clock_limits']}, {run['avg_power_w']} W of {run['gpu_power_limit_w']}")  # fmt: skip
    assert status == "completed", run["error"]
    assert run["gemm_timing"] == timing and run["gemm_us"] > 0
    if run["clock_samples"] is None:
        pytest.skip(f"{run['gpu_name']}: NVML read no clock (a MIG instance, or no NVML)")
    assert 100 < run["sm_clock_mhz"] <= (run["gpu_max_sm_clock_mhz"] or math.inf)
    names = run["clock_limits"].split(",")
    assert names == [NO_CLOCK_LIMITS] or set(names) <= {*CLOCK_LIMITS.values()}, run["clock_limits"]
    measured = [s for s in steps if s["phase"] == "measure"]
    if timing == "burst":
        assert len(measured) == 20 and run["clock_samples"] == 20 and run["energy_j"] is None
    else:
        # measured_s sums the rows' times, each per GEMM: the device time measured is G times it.
        # One sample a replay, at most one per 10 ms: 100 in 3 s, or one a step of 100 long GEMMs.
        assert run["measured_s"] * GEMMS_PER_REPLAY >= 3.0 and run["clock_samples"] >= min(
            100, len(measured) // 2
        )


# --- the GPU's energy (workloads/instruments/gpu_energy.py) ---------------------------------------


class PowerSamples(Instrument):
    """The cross-check of the energy counter: NVML's power reading of the cell's GPU
    (`nvmlDeviceGetPowerUsage`), sampled every POWER_POLL_S in a thread of its own from before the
    build to the loop's end, with the host clock; and the host clock where the measured window
    opened and closed. Placed right after the cell's GpuEnergy, so its moments follow the counter's
    readings by microseconds."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []  # (host clock, W)
        self.window: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def before_build(self) -> None:
        from workloads.instruments.nvml import EnergyCounter

        board = EnergyCounter.open(torch.device("cuda", 0))  # the cell's: one process, rank 0's GPU
        if board is None:
            return

        def sample() -> None:
            while not self._stop.is_set():
                self.samples.append(
                    (time.perf_counter(), board.nv.nvmlDeviceGetPowerUsage(board.handle) / 1e3)
                )
                self._stop.wait(POWER_POLL_S)
            board.close()

        self._thread = threading.Thread(target=sample, name="power-samples", daemon=True)
        self._thread.start()

    def before_measuring(self) -> None:
        self.window.append(time.perf_counter())

    def after_loop(self) -> dict:
        self.window.append(time.perf_counter())
        self.stop()
        return {}

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def joules(self) -> float:
        """The samples integrated over the measured window (trapezoids, clipped to it)."""
        start, end = self.window
        total = 0.0
        for (t0, p0), (t1, p1) in zip(self.samples, self.samples[1:]):
            overlap = min(t1, end) - max(t0, start)
            if overlap > 0:
                total += overlap * (p0 + p1) / 2
        return total


#: How often the power reading is sampled (s): a call costs well under a millisecond.
POWER_POLL_S = 0.01
#: How far the counter and the integrated power readings may be apart (issue 27 asks for 10%). On
#: Ampere and newer GPUs NVML's power reading is an average over the second before: at the window's
#: start it still holds the waits before measuring, a lag of about half a second at a step of the
#: power (a few % of a 15 s window), not a disagreement of the two.
COUNTER_VS_SAMPLES_RTOL = 0.10
#: What the measured window's wall seconds may hold beyond its steps' device time: the host's
#: bookkeeping between a paired cell's blocks (the stop rule, the next block's events: under a
#: millisecond a block, no step's time) and the /proc scans of the instruments closing their windows
#: before the energy's reading (milliseconds).
WINDOW_SLACK_S, WINDOW_SLACK_SHARE = 0.25, 0.02


@pytest.mark.parametrize(
    "backend, paired", [("eager", False), ("inductor", True)], ids=["eager", "inductor-paired"]
)
def test_a_gpt2_cell_measures_its_gpus_energy(
    backend: str, paired: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPT-2 124M (bf16, one micro-step) eager, and inductor paired with its eager side, each for 15 s:
    the energy counter's joules per step are positive and below what the power limit allows at the
    side's mean step; the window's seconds cover its steps (the last warm-up step and every measured
    one, both sides of a paired cell) and little more; and the counter agrees with NVML's power
    readings integrated over the same window."""
    from workloads.instruments.base import Instruments
    from workloads.instruments.energy import window_start
    from workloads.instruments.gpu_energy import GpuEnergy
    from workloads.run import run_cell

    samples = PowerSamples()

    def with_samples(real: Instruments) -> Instruments:
        instruments = real.members
        at = next(i for i, instrument in enumerate(instruments) if isinstance(instrument, GpuEnergy))
        return Instruments([*instruments[: at + 1], samples, *instruments[at + 1 :]])

    with_instruments(monkeypatch, with_samples)
    config = gpu_config(
        size="medium",
        precision={"name": "bf16"},
        grad_accum=1,
        backend={"name": backend},
        warmup_steps=3,
        # blocks of 1 s: the counter's energy per block is a side's only over many of its updates
        measure={"min_seconds": 15.0, "paired": paired, "block_seconds": 1.0},
    )
    try:
        status = run_cell(cell_config_from_dict(config), tmp_path / "cell")
    finally:
        samples.stop()
    run = pq.read_table(tmp_path / "cell" / "run.parquet").to_pylist()[-1]
    steps = sorted(pq.read_table(tmp_path / "cell" / "steps.parquet").to_pylist(), key=lambda s: s["step"])
    assert status == "completed", run["error"]
    assert run["paired"] == paired
    if run["energy_j"] is None:
        pytest.skip(f"{run['gpu_name']}: no energy counter (a GPU before Volta, or a MIG instance)")
    limit, ranks = run["gpu_power_limit_w"], run["world_size"]
    window = steps[window_start([s["phase"] for s in steps]) :]
    window_s = sum(s["step_time_ms"] for s in window) / 1e3
    counter, sampled = run["energy_j"], samples.joules()
    print(
        f"{backend}: {counter:.1f} J over {run['energy_window_s']:.2f} s ({window_s:.2f} s of steps, "
        f"{len(window)} steps), power readings {sampled:.1f} J ({sampled / counter - 1:+.1%}); "
        f"{run['joules_per_step']:.3f} J/step (eager side {run['eager_joules_per_step']}), "
        f"{run['avg_power_w']:.0f} W of {limit:.0f} W, idle {run['idle_power_w']:.0f} W "
        f"(settled {run['idle_settled']}, counter updates every {run['energy_update_s']} s), "
        f"compiled blocks' edge share {run['energy_edge_share']}, "
        f"{run['items_per_joule']:.1f} tokens/J, compile {run['compile_energy_j']} J"
    )
    assert run["energy_window_steps"] == len(window)
    assert 0.98 * window_s <= run["energy_window_s"] <= window_s * (1 + WINDOW_SLACK_SHARE) + WINDOW_SLACK_S
    assert sampled == pytest.approx(counter, rel=COUNTER_VS_SAMPLES_RTOL)
    assert 0 < run["idle_power_w"] < run["avg_power_w"] < 1.05 * limit
    # the board idle before the cell settles within read_idle's 10 s; the driver updates every 20-100 ms
    assert run["idle_settled"] is True and 0.015 <= run["energy_update_s"] <= 0.12
    if paired:  # the compiled blocks' time between their steps, within the +2% allowed below
        assert 0 <= run["energy_edge_share"] < 0.02
    else:
        assert run["energy_edge_share"] is None
    # J per step is a side's power times its mean step (a block's energy spans the bookkeeping
    # before it too): at most the power limit's, the mean and not the median being what it is over.
    sides = (
        [("compiled", "joules_per_step"), ("eager", "eager_joules_per_step")]
        if paired
        else [(None, "joules_per_step")]
    )
    for side, column in sides:
        mean_step_s = statistics.fmean(
            s["step_time_ms"] / 1e3 for s in steps if s["phase"] == "measure" and s["side"] == side
        )
        assert 0 < run[column] < limit * mean_step_s * ranks * (1 + WINDOW_SLACK_SHARE), column
    assert run["items_per_joule"] == pytest.approx(run["items_per_step"] / run["joules_per_step"])
    if paired:
        # each measured step holds its block's share; the blocks hold the window but its last warm-up step
        measured = [s["energy_j"] for s in window if s["phase"] == "measure"]
        # (equal where the counter did not move during that one warm-up step)
        assert None not in measured and sum(measured) <= counter + 1e-6  # float sums of the shares
        assert run["compile_energy_j"] >= 0
    else:
        assert {s["energy_j"] for s in steps} == {None} and run["compile_energy_j"] is None
