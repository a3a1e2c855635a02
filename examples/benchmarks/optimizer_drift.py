"""Is the loss drift of the tiny ResNet under inductor with a compiled optimizer step numerics or a
bug? (issue 13, item 5)

On the CPU, resnet tiny (timm resnet10t, 64 px, batch 4, fp32) trained with backend=inductor and
backend.compile_optimizer=true drifts from the eager cell's loss curve by about 1.3e-4 relative in
8 steps, where inductor with the eager optimizer step drifts about 1e-7. The optimizer is SGD with
Nesterov momentum and weight decay (workloads/models build_timm); the compiled step is
workloads/cell/backends.py compile_optimizer_step. The cells are built as the tests' tiny cells are
(tests/conftest.py tiny_config, workloads.train_cell.prepare_cell) and trained for their 8 steps (2 warm-up
+ 6 measured); the script prints one table:

1. loss drift against eager, fp32 and float64 (model and data cast to double after the cell is
   built), of the inductor model, of the compiled optimizer step alone, and of both (the cell);
2. every compiled update against eager SGD (the optimizer's class and settings) applied to the same
   state: the same parameters, gradients and momentum buffers; the largest difference in ulps of
   the update's largest term (parameter, lr x gradient, lr x momentum buffer);
3. the eager and the inductor model with the eager optimizer step, fp32, initial weights multiplied
   by 1 +- 2^-23 (one ulp), 12 seeds: how far one-ulp differences carry without a compiled optimizer;
4. where the fp32 drift of the cell starts: the first step whose gradients differ from the eager
   model's on the same parameters and batch, and the one ReLU element whose flipped sign in the
   eager model gives inductor's gradients there.

The same update to a few ulps (2) and a drift that vanishes in float64 (1) mean numerics; an update
that differs, or a float64 drift near the fp32 one, would mean a bug. (3) and (4) say where the fp32
drift comes from instead.

    PYTHONPATH=. python3 examples/benchmarks/optimizer_drift.py    # CPU; 2 cores: 100 s, 40 s with a warm
                                                                # inductor cache
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from tests.conftest import tiny_config
from workloads.cell import backends
from workloads.cell.config import CellConfig
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.recorder import CellRecorder
from workloads.instruments import dynamo_records
from workloads.instruments.provenance import cpu_model
from workloads.models import ModelSpec, build_model
from workloads.train_cell import prepare_cell

#: The tiny cells' steps: 2 warm-up + 6 measured.
STEPS = 8
PERTURB_SEEDS = 12
#: Gradients of the inductor model and of the eager model on the same parameters and batch differ by
#: 2e-5 to 8e-5 (largest difference over the largest gradient of a tensor, measured) where no ReLU
#: input takes another side of zero; a step above this threshold is where a drift starts.
GRAD_JUMP = 1e-3
#: ReLU elements tried as the kink: those whose fp32 rounding error is largest next to their value.
KINK_CANDIDATES = 8


@dataclass
class StepInputs:
    """What one step's gradients and update were computed from."""

    params: list[torch.Tensor]
    """The parameters before the step's update."""
    x: torch.Tensor
    y: torch.Tensor
    grads: list[torch.Tensor] = field(default_factory=list)


@dataclass
class Run:
    losses: list[float] = field(default_factory=list)
    """Each step's loss at the run's precision (TrainStep returns it summed into an fp32 tensor)."""
    update_ulps: float = 0.0
    """The largest difference between a compiled update and eager SGD's on the same state, in ulps of
    the update's largest term; 0 where the optimizer step is eager."""
    steps: list[StepInputs] = field(default_factory=list)
    """Each step's inputs, where the run was asked to record them."""


def cell_config(model: str, compiled_optimizer: bool = False) -> CellConfig:
    """The tiny ResNet cell; `compiled_optimizer` only where the model compiles (the config refuses
    backend.compile_optimizer with backend=eager)."""
    overrides = {"backend": {"compile_optimizer": True}} if compiled_optimizer and model != "eager" else {}
    return cell_config_from_dict(tiny_config("resnet", model, **overrides))


def train(
    model: str,
    compiled_optimizer: bool,
    dtype: torch.dtype,
    perturb_seed: int | None = None,
    record: bool = False,
) -> Run:
    """Train the tiny ResNet cell for its 8 steps with the model under `model` (eager, inductor) and
    the optimizer step eager or compiled by inductor, at `dtype`."""
    step = prepare_cell(cell_config(model, compiled_optimizer), CellRecorder("optimizer-drift", 1)).step
    if compiled_optimizer and model == "eager":  # compiled as prepare_cell compiles it for inductor
        step.update.step = backends.compile_optimizer_step(
            step.update.optimizer, cell_config("inductor").backend
        )
    step.model.module.to(dtype)  # in place: the optimizer's parameters stay the same objects
    step.batches = ((x.to(dtype), y) for x, y in step.batches)
    if perturb_seed is not None:
        perturb(step.params, perturb_seed)

    run = Run()
    loss_fn, optimizer_step = step.model.loss_fn, step.update.step

    def recording_loss(module: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if record:
            run.steps.append(StepInputs([p.detach().clone() for p in step.params], x.clone(), y.clone()))
        loss = loss_fn(module, x, y)
        run.losses.append(loss.item())
        return loss

    def checked_optimizer_step() -> None:
        params = [p.detach().clone() for p in step.params]
        grads = [p.grad.clone() for p in step.params]
        state = copy.deepcopy(step.update.optimizer.state_dict())
        optimizer_step()
        if record:
            run.steps[-1].grads = grads
        if compiled_optimizer:
            eager, buffers = eager_update(step.update.optimizer, params, grads, state)
            # The terms of SGD's update: the parameter, lr x the gradient, lr x the momentum buffer.
            # Where they cancel, the result's own ulp is far finer than what rounding in the terms
            # leaves (thousands of its ulps, measured), so differences count in ulps of the largest.
            lr = step.update.optimizer.param_groups[0]["lr"]
            scale = [
                torch.stack([p.abs(), lr * g.abs(), lr * b.abs()]).amax(0)
                for p, g, b in zip(params, grads, buffers)
            ]
            run.update_ulps = max(run.update_ulps, ulps([p.detach() for p in step.params], eager, scale))

    step.model.loss_fn, step.update.step = recording_loss, checked_optimizer_step
    for _ in range(STEPS):
        step()
    if model != "eager" or compiled_optimizer:  # dynamo falls back to eager silently past its limits
        assert dynamo_records.compile_stats().graph_count > 0, "nothing was compiled"
    return run


def perturb(params: list[torch.Tensor], seed: int) -> None:
    """Multiply every parameter element by 1 + 2^-23 or 1 - 2^-23, at random: about one fp32 ulp."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            sign = torch.randint(0, 2, p.shape, generator=generator).to(p.dtype) * 2 - 1
            p.mul_(1 + sign * 2.0**-23)


def eager_update(
    optimizer: torch.optim.Optimizer, params: list[torch.Tensor], grads: list[torch.Tensor], state: dict
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The parameters and momentum buffers after one eager step of an SGD of `optimizer`'s settings
    from `params`, `grads` and the state_dict `state`."""
    twins = [nn.Parameter(p.clone()) for p in params]
    for twin, grad in zip(twins, grads):
        twin.grad = grad.clone()
    eager = type(optimizer)(twins, **optimizer.defaults)
    eager.load_state_dict(state)
    eager.step()
    return [twin.detach() for twin in twins], [eager.state[twin]["momentum_buffer"] for twin in twins]


def ulps(values: list[torch.Tensor], reference: list[torch.Tensor], scale: list[torch.Tensor]) -> float:
    """The largest |value - reference| in ulps of `scale`, the largest term that went into it."""
    worst = 0.0
    for v, r, s in zip(values, reference, scale):
        spacing = torch.nextafter(s, torch.tensor(float("inf"), dtype=s.dtype)) - s
        worst = max(worst, ((v - r).abs() / spacing).max().item())
    return worst


def max_rel_diff(a: list[float], b: list[float]) -> float:
    """Largest |a_i - b_i| / |b_i| over two loss curves (as
    tests/unit/workloads/test_compiled_trains_like_eager.py)."""
    return max(abs(x - y) / abs(y) for x, y in zip(a, b))


def grad_difference(grads: list[torch.Tensor], reference: list[torch.Tensor]) -> float:
    """Largest difference of a gradient element over the largest reference element of its tensor."""
    return max(
        ((g - r).abs().max() / r.abs().max().clamp_min(1e-30)).item() for g, r in zip(grads, reference)
    )


# --- where the drift starts ---------------------------------------------------------------------


@dataclass
class Kink:
    step: int
    jump: float
    """The step's gradient difference, inductor model against eager model on the same inputs."""
    before: float
    """The largest such difference of the steps before it."""
    relu: str
    index: int
    """The element of the ReLU's input (flattened in logical NCHW order)."""
    value_fp64: float
    error_fp32: float
    """The eager model's fp32 value minus its fp64 value there."""
    after_flip: float
    """The step's gradient difference once the eager model takes the other side of zero there."""


def eager_model(dtype: torch.dtype) -> ModelSpec:
    """The tiny cell's model, eager, in the cell's memory format, at `dtype`."""
    cfg = cell_config("eager")
    spec = build_model(cfg)
    spec.module.to(
        dtype, memory_format=torch.channels_last if cfg.model.channels_last else torch.contiguous_format
    )
    return spec


def load(spec: ModelSpec, params: list[torch.Tensor]) -> None:
    with torch.no_grad():
        for p, value in zip(spec.module.parameters(), params):
            p.copy_(value)


def gradients(spec: ModelSpec, inputs: StepInputs) -> list[torch.Tensor]:
    load(spec, inputs.params)
    spec.module.zero_grad(set_to_none=True)
    dtype = next(spec.module.parameters()).dtype
    spec.loss(spec.module, inputs.x.to(dtype), inputs.y).backward()
    return [p.grad for p in spec.module.parameters()]


def relu_inputs(spec: ModelSpec, inputs: StepInputs) -> dict[str, torch.Tensor]:
    """Every ReLU's input in the forward pass of `inputs`, flattened (the ReLUs act in place)."""
    captured: dict[str, torch.Tensor] = {}

    def capture(name: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        return lambda module, args: captured.__setitem__(
            name, args[0].detach().to(torch.float64, copy=True).flatten()
        )

    hooks = [
        module.register_forward_pre_hook(capture(name))
        for name, module in spec.module.named_modules()
        if isinstance(module, nn.ReLU)
    ]
    load(spec, inputs.params)
    with torch.no_grad():
        spec.module(inputs.x.to(next(spec.module.parameters()).dtype))
    for hook in hooks:
        hook.remove()
    return captured


class FlippedReLU(nn.Module):
    """ReLU that takes the other side of zero at one element: passes it where ReLU would zero it,
    zeroes it where ReLU would pass it (value and derivative)."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        keep = (t > 0).flatten()
        keep[self.index] = ~keep[self.index]
        return t * keep.view(t.shape).to(t.dtype)


@contextlib.contextmanager
def flipped(module: nn.Module, relu: str, index: int) -> Iterator[None]:
    parent, _, child = relu.rpartition(".")
    owner = module.get_submodule(parent)
    original = getattr(owner, child)
    setattr(owner, child, FlippedReLU(index))
    try:
        yield
    finally:
        setattr(owner, child, original)


def find_kink(run: Run) -> Kink | None:
    """The first step of `run` (inductor model) whose gradients jump away from the eager model's on
    the same parameters and batch, and the ReLU element that accounts for the jump: of the elements
    whose fp32 rounding error is largest next to their value, the one whose flip brings the eager
    model's gradients closest to inductor's."""
    fp32, fp64 = eager_model(torch.float32), eager_model(torch.float64)
    before = 0.0
    for number, inputs in enumerate(run.steps):  # noqa: B007 (`number` is the kink's step, after the break)
        jump = grad_difference(inputs.grads, gradients(fp32, inputs))
        if jump > GRAD_JUMP:
            break
        before = max(before, jump)
    else:
        return None
    values32, values64 = relu_inputs(fp32, inputs), relu_inputs(fp64, inputs)
    candidates = []  # (value over rounding error, relu, element)
    for relu, v64 in values64.items():
        closeness = v64.abs() / (values32[relu] - v64).abs().clamp_min(1e-300)
        smallest = closeness.topk(KINK_CANDIDATES, largest=False)
        candidates += zip(smallest.values.tolist(), [relu] * KINK_CANDIDATES, smallest.indices.tolist())
    tried = []
    for _, relu, element in sorted(candidates)[:KINK_CANDIDATES]:
        with flipped(fp32.module, relu, element):
            tried.append((grad_difference(inputs.grads, gradients(fp32, inputs)), relu, element))
    after_flip, relu, element = min(tried)
    value = values64[relu][element].item()
    return Kink(
        number, jump, before, relu, element, value, values32[relu][element].item() - value, after_flip
    )


# --- the table ------------------------------------------------------------------------------------


def main() -> None:
    start = time.perf_counter()
    print(
        f"torch {torch.__version__}, {cpu_model()}, {torch.get_num_threads()} threads; "
        f"resnet tiny, {STEPS} steps",
        flush=True,
    )

    def done(what: str) -> None:
        print(f"  done: {what} ({time.perf_counter() - start:.0f} s)", flush=True)

    dtypes = {"fp32": torch.float32, "fp64": torch.float64}
    variants = {
        "inductor model, eager optimizer step": ("inductor", False),
        "eager model, compiled optimizer step": ("eager", True),
        "inductor model and compiled optimizer step (the cell)": ("inductor", True),
    }
    eager = {label: train("eager", False, dtype).losses for label, dtype in dtypes.items()}
    drift: dict[str, dict[str, float]] = {variant: {} for variant in variants}
    update_ulps: dict[str, dict[str, float]] = {
        variant: {} for variant, (_, compiled) in variants.items() if compiled
    }
    kink = None
    for label, dtype in dtypes.items():
        for variant, (model, compiled_optimizer) in variants.items():
            the_cell = variant.endswith("(the cell)") and label == "fp32"
            run = train(model, compiled_optimizer, dtype, record=the_cell)
            drift[variant][label] = max_rel_diff(run.losses, eager[label])
            if compiled_optimizer:
                update_ulps[variant][label] = run.update_ulps
            if the_cell:
                kink = find_kink(run)
            done(f"{label} {variant}")
    perturbed = {
        model: [
            max_rel_diff(train(model, False, torch.float32, perturb_seed=seed).losses, eager["fp32"])
            for seed in range(PERTURB_SEEDS)
        ]
        for model in ("eager", "inductor")
    }
    done("perturbed weights")

    width = 58
    print(f"\n{'':{width}} {'fp32':>9} {'fp64':>9}")
    print("1. loss drift against eager (max relative difference)")
    for variant, values in drift.items():
        print(f"   {variant:{width - 3}} {values['fp32']:9.2g} {values['fp64']:9.2g}")
    print("2. compiled update against eager SGD on the same state (max ulps)")
    for variant, values in update_ulps.items():
        print(f"   {variant:{width - 3}} {values['fp32']:9.3g} {values['fp64']:9.3g}")
    print(
        f"3. weights x (1 +- 2^-23), eager optimizer step, {PERTURB_SEEDS} seeds: fp32 loss drift "
        "against eager"
    )
    for model, drifts in perturbed.items():
        print(
            f"   {model} model: max {max(drifts):.2g}, median {statistics.median(drifts):.2g}, "
            f"{sum(d > 1e-5 for d in drifts)} seed(s) above 1e-5"
        )
    print("4. where the fp32 drift of the cell starts")
    if kink is None:
        print("   no step's gradients jump away from the eager model's")
    else:
        print(
            f"   step {kink.step}: gradients differ from the eager model's on the same parameters and batch "
            f"by {kink.jump:.2g} (steps before: at most {kink.before:.2g})"
        )
        print(
            f"   {kink.relu} input element {kink.index}: {kink.value_fp64:.2g} in fp64, fp32 rounding error "
            f"{kink.error_fp32:+.2g}; with its sign flipped the eager model's gradients differ from "
            f"inductor's by {kink.after_flip:.2g}"
        )
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
