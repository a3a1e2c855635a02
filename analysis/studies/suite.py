"""The suite tables of a model-zoo sweep (`+suite=timm_train`, conf/suite/): per compiled backend,
how many models pass and how much faster they train, as PyTorch's dynamo benchmarks report their
suites; every model that does not pass, named with its first error line; and every model's
speedup, fastest first.

Each compiled cell is compared with the eager cell of the same model (all workload and process
axes equal) and ends in exactly one outcome (OUTCOMES, first that applies):

    no result       the compiled cell has no result (not run, queued, lost, cancelled, unreadable)
    not supported   the device cannot run what the cell asks for (status not_supported: fp8 without
                    fp8 tensor cores); eager cannot either, so it is no failure of the backend
    eager failed    the eager cell of the model did not complete: nothing to compare with
    compile error   the compiled cell failed while eager completed (compiling, or the compiled code)
    not compiled    a compiled backend was asked for and nothing compiled (status not_compiled)
    OOM, timeout    the compiled cell's status
    fails accuracy  completed, but its accuracy check failed (workloads/instruments/accuracy.py: the
                    same batches and state, dropout off, compiled against eager beyond tolerance and
                    noise floor); a cell the check did not run on (torchscript, distributed, a sweep
                    from before it): its loss differs from eager's by more than LOSS_RTOL in one of
                    the first LOSS_STEPS steps (same seed, same weights and batches)
    passed          completed and trains as eager does

The pass rate counts every model of the backend, whatever its outcome; speedups, compile times
and memory are over the passed models only, and the failures table names the others, so that a
failing model never leaves a mean unseen. Compile times are over cold compiles only: a suite
shares its compile cache (`cluster.compile_cache=shared`), and a model whose graphs an earlier
cell compiled (deit and vit share theirs; a retried cell finds its own) compiles in seconds. A model's
compile time is break-even's, a cold replicate's where one was (analysis/cells/breakeven.py); models
without one are counted as "from cache" and left out of the compile columns.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.cells.loaded import Loaded
from analysis.cells.metrics import ACCURACY_COLUMNS
from analysis.reading.axes import axis_text, backend_labels
from analysis.rendering.text import Table, fmt_accuracy, fmt_number, fmt_percent, fmt_speedup, is_null
from analysis.statistics.bootstrap import geometric_mean
from analysis.studies.base import Study
from workloads.contract import vocabulary
from workloads.contract.sweep_dir import cell_dirs, read_cell_config
from workloads.contract.vocabulary import BASELINE_BACKEND, COMPLETED, PROCESSES, WORKLOAD, names, short_error

#: The top-level key a suite's config (conf/suite/*.yaml) gives every cell: {name: ...}.
SUITE_KEY = "suite"
#: Without an accuracy check, the loss is compared in the first steps only: step 0 sees the same
#: weights and batch in eager and compiled training, and rounding has had two optimizer steps to grow.
#: Later, chaos and a loss near zero (a few cycled synthetic batches are learnt by heart) make
#: relative differences meaningless. 2% is PyTorch's training-accuracy tolerance of 1e-2 with room
#: for bf16 autocast.
LOSS_STEPS, LOSS_RTOL = 3, 0.02
PASSED, FAILS_ACCURACY, COMPILE_ERROR, NOT_COMPILED, OOM, TIMEOUT, NOT_SUPPORTED, EAGER_FAILED, NO_RESULT = (
    "passed",
    "fails accuracy",
    "compile error",
    "not compiled",
    "OOM",
    "timeout",
    "not supported",
    "eager failed",
    "no result",
)
OUTCOMES = (
    PASSED,
    FAILS_ACCURACY,
    COMPILE_ERROR,
    NOT_COMPILED,
    OOM,
    TIMEOUT,
    NOT_SUPPORTED,
    EAGER_FAILED,
    NO_RESULT,
)
_BY_STATUS = {
    vocabulary.FAILED: COMPILE_ERROR,
    vocabulary.NOT_COMPILED: NOT_COMPILED,
    vocabulary.OOM: OOM,
    vocabulary.TIMEOUT: TIMEOUT,
    vocabulary.NOT_SUPPORTED: NOT_SUPPORTED,
}
#: What tells the models of a suite apart; the eager cell of a model agrees on all of them.
_MODEL = names(WORKLOAD, PROCESSES)


def suite_name(sweep_dir: Path) -> str | None:
    """The suite a sweep directory was run as (its first cell's config), None for another sweep."""
    for directory in cell_dirs(sweep_dir):
        suite = read_cell_config(directory, None).get(SUITE_KEY)
        return str(suite.get("name")) if isinstance(suite, dict) else None
    return None


def early_loss_rel_diff(metrics: pd.DataFrame, steps: pd.DataFrame, eager: pd.Series) -> pd.Series:
    """Largest |loss - eager's| / |eager's| over the first LOSS_STEPS steps of each cell's first
    replicate, against the cell `eager` names (NaN where either recorded none)."""
    early = steps[steps["step"] < LOSS_STEPS]
    early = early[early["repeat"] == early.groupby("cell_id", observed=True)["repeat"].transform("min")]
    loss = early.assign(cell_id=early["cell_id"].astype(str)).set_index(["cell_id", "step"])["loss"]
    pairs = pd.DataFrame({"cell_id": metrics["cell_id"], "eager": eager}).dropna()
    own = pairs.merge(loss.rename("own").reset_index(), on="cell_id")
    both = own.merge(loss.rename("ref").rename_axis(["eager", "step"]).reset_index(), on=["eager", "step"])
    worst = ((both["own"] - both["ref"]).abs() / both["ref"].abs()).groupby(both["cell_id"]).max()
    return metrics["cell_id"].map(worst)


def _accuracy_outcome(cell: pd.Series, early_diff: float) -> tuple[str, str]:
    """PASSED or FAILS_ACCURACY for a completed cell whose eager cell completed, and the line that says
    why: its accuracy check where it has one, else its early loss against eager's (`early_diff`)."""
    if is_null(cell["accuracy"]):
        if early_diff > LOSS_RTOL:
            why = f"loss {fmt_percent(early_diff)} off eager's in the first {LOSS_STEPS} steps"
            return FAILS_ACCURACY, f"{why} (no accuracy check)"
        return PASSED, ""
    if cell["accuracy"] == vocabulary.ACCURACY_FAIL:
        result = fmt_accuracy(*(cell[column] for column in ACCURACY_COLUMNS))
        return FAILS_ACCURACY, f"accuracy check: {result}"
    return PASSED, ""


def outcomes(metrics: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per compiled cell: backend label, model, outcome, speedup and the line that says why."""
    model = metrics.groupby(_MODEL, dropna=False, sort=False).ngroup()
    eager = metrics[metrics["backend"] == BASELINE_BACKEND].assign(_model=model)
    eager = eager.sort_values("status", key=lambda s: s != COMPLETED, kind="stable").drop_duplicates("_model")
    eager = eager.set_index("_model")
    compiled = metrics["backend"] != BASELINE_BACKEND
    base_status = model.map(eager["status"])
    base_error = model.map(eager["error"])
    diff = early_loss_rel_diff(metrics, steps, model.map(eager["cell_id"]).where(compiled))
    # What the model's answer cost: the compiled cell's attempts and its model's eager cell's.
    cost = {k: metrics[f"spent_{k}"] + model.map(eager[f"spent_{k}"]).fillna(0) for k in ("gpu_s", "j")}
    labels = backend_labels(metrics)
    # the compile break-even counts with: a cold replicate's where one was (analysis/cells/breakeven.py)
    from_cache = metrics["break_even_compile_warm"].eq(True)  # an FX graph or AOTAutograd hit; unknown: cold
    rows = []
    for i in np.flatnonzero(compiled.to_numpy()):
        cell = metrics.iloc[i]
        status, error = cell["status"], cell["error"]
        if status == COMPLETED and base_status.iloc[i] == COMPLETED:
            outcome, why = _accuracy_outcome(cell, diff.iloc[i])
        elif status not in (COMPLETED, *_BY_STATUS):
            outcome, why = NO_RESULT, axis_text(status)
        elif base_status.iloc[i] != COMPLETED and status != vocabulary.NOT_SUPPORTED:
            outcome, why = (
                EAGER_FAILED,
                f"eager {axis_text(base_status.iloc[i]) or 'missing'}: {short_error(base_error.iloc[i])}",
            )
        else:
            outcome, why = _BY_STATUS[status], short_error(error)
        rows.append(
            {
                "cell_id": cell["cell_id"],
                "backend": labels.iloc[i],
                "model": axis_text(cell["arch"]) or axis_text(cell["model"]),
                "outcome": outcome,
                "speedup": cell["speedup"],
                "speedup_low": cell["speedup_low"],
                "speedup_high": cell["speedup_high"],
                "compile_time_s": cell["break_even_compile_s"],
                "from_cache": bool(from_cache.iloc[i]),
                "peak_mem_ratio": cell["peak_mem_ratio"],
                "cost_gpu_s": cost["gpu_s"].iloc[i],
                "cost_j": cost["j"].iloc[i],
                "why": why.rstrip(": "),
            }
        )
    return pd.DataFrame(
        rows,
        columns=[
            "cell_id",
            "backend",
            "model",
            "outcome",
            "speedup",
            "speedup_low",
            "speedup_high",
            "compile_time_s",
            "from_cache",
            "peak_mem_ratio",
            "cost_gpu_s",
            "cost_j",
            "why",
        ],
    )


def _summary(cells: pd.DataFrame) -> dict[str, object]:
    """The suite row of one backend's outcomes."""
    passed = cells[cells["outcome"] == PASSED]
    speedup = passed["speedup"].to_numpy(float)
    from_cache = passed["from_cache"].to_numpy(bool)
    compile_s = passed["compile_time_s"][~from_cache].dropna().to_numpy(float)
    known = speedup[np.isfinite(speedup)]
    memory, memory_models = geometric_mean(passed["peak_mem_ratio"].to_numpy(float))
    return {
        "models": len(cells),
        "passed": len(passed),
        "pass_rate": len(passed) / len(cells),
        **{outcome: int((cells["outcome"] == outcome).sum()) for outcome in OUTCOMES[1:]},
        "geomean_speedup": geometric_mean(speedup)[0],
        "geomean_speedup_clipped": geometric_mean(np.maximum(speedup, 1.0))[0],
        "slower_share": float((known < 1).mean()) if len(known) else np.nan,
        "compiled_from_cache": int(from_cache.sum()),
        "compile_s_median": float(np.median(compile_s)) if len(compile_s) else np.nan,
        "compile_s_p90": float(np.quantile(compile_s, 0.9)) if len(compile_s) else np.nan,
        "peak_mem_ratio_geomean": memory,
        "peak_mem_models": memory_models,
        "cost_gpu_h": cells["cost_gpu_s"].sum(min_count=1) / 3600,
        "cost_kj": cells["cost_j"].sum(min_count=1) / 1e3,
    }


#: (header, column, format) of the numbers over the passed models.
_OVER_PASSED = (
    ("geomean speedup", "geomean_speedup", fmt_speedup),
    ("geomean clipped ≥1", "geomean_speedup_clipped", fmt_speedup),
    ("slower than eager", "slower_share", fmt_percent),
    ("compile s median", "compile_s_median", fmt_number),
    ("compile s p90", "compile_s_p90", fmt_number),
    ("from cache", "compiled_from_cache", str),
)


def _of_passed(value: float, models: int, passed: int) -> str:
    """A mean over the passed models, with how many it rests on where some had no value."""
    return fmt_number(value) + (f" ({models} of {passed})" if 0 < models < passed else "")


def _per_model(cells: pd.DataFrame, name: str) -> Table:
    """Every model of every compiled backend, the passed ones fastest first: what the suite row
    averages, so that a reader sees which models make the mean."""
    order = cells.assign(_failed=cells["outcome"] != PASSED, _speedup=-cells["speedup"].fillna(0))
    data = order.sort_values(["backend", "_failed", "_speedup", "model"], kind="stable")[cells.columns]
    data = data.reset_index(drop=True)
    text = pd.DataFrame({
        "backend": data["backend"], "model": data["model"], "outcome": data["outcome"],
        "speedup [95% CI]": [fmt_speedup(*values) for values in
                             zip(data["speedup"], data["speedup_low"], data["speedup_high"])],
        "compile s": np.where(data["from_cache"], "from cache", data["compile_time_s"].map(fmt_number)),
        "peak mem vs eager": data["peak_mem_ratio"].map(
            lambda ratio: "" if is_null(ratio) else f"{ratio:.3f}"
        ),
    })  # fmt: skip
    note = (
        "One row per model and backend: speedup over eager, paired where the cell measured paired (the "
        "median of its pair ratios, eager and compiled blocks alternating in one process, interval over "
        "the pairs), else over the eager cell of the model (eager median step / own, interval over the "
        "steps of this run: it does not cover another run of a launch-bound model, see docs/suites.md), "
        "compile time (from cache: its graphs were found in the shared compile cache), peak memory / "
        "eager's (paired: the compiled blocks' peak / the eager blocks'; none where one process's peak "
        "covers both sides: the CPU, older sweeps)."
    )
    return Table("suite_models", f"Suite {name}: speedup per model", data, text, note)


def suite_tables(metrics: pd.DataFrame, steps: pd.DataFrame, name: str) -> list[Table]:
    """The suite table (one row per compiled backend), the failures table (one row per model and
    backend that did not pass) and the per-model table of suite `name`."""
    cells = outcomes(metrics, steps)
    data = pd.DataFrame(
        [{"backend": backend, **_summary(group)} for backend, group in cells.groupby("backend")]
    )
    if data.empty:
        return []
    text = pd.DataFrame({
        "backend": data["backend"],
        "pass rate": [f"{fmt_percent(r)} ({p} of {n})" for r, p, n in zip(data["pass_rate"], data["passed"],
                                                                          data["models"])],
        **{outcome: data[outcome].astype(str) for outcome in OUTCOMES[1:]},
        **{header: data[column].map(fmt) for header, column, fmt in _OVER_PASSED},
        "peak mem vs eager": [_of_passed(*v) for v in zip(data["peak_mem_ratio_geomean"],
                                                          data["peak_mem_models"], data["passed"])],
        "cost GPU-h": data["cost_gpu_h"].map(fmt_number),
        **({"cost kJ": data["cost_kj"].map(fmt_number)} if data["cost_kj"].notna().any() else {}),
    })  # fmt: skip
    note = (
        f"Suite {name}: each model compiled by the backend against the eager cell of the same model. Pass "
        "rate over every model, whatever its outcome (each counted in one column: fails accuracy = "
        "completed, but its accuracy check failed, or, where it had none, the loss is more than "
        f"{fmt_percent(LOSS_RTOL, 0)} off eager's in one of the first {LOSS_STEPS} steps; compile error = "
        "failed while eager completed; not supported = the device cannot run the cell, fp8 without fp8 "
        "tensor cores; eager failed = the eager cell did not complete); the models that "
        "did not pass are named in the next table. Over the passed models: "
        "geometric-mean speedup (paired where measured, else eager median step / own), unclipped and "
        "clipped at 1 (PyTorch's dashboard convention: a model slower than eager counts as 1x), the share "
        "slower than eager, median and 90th "
        "percentile of cold compile time (from cache: models whose compile found its graphs in the shared "
        "compile cache, left out of those two), geometric mean of peak memory / eager's (a paired cell's own "
        "eager side's; over the models that have it where some have none). Cost: what the "
        "row's answers cost, over all its models (passed or not), each its compiled cell's attempts and "
        "its eager cell's (GPU-hours: start to end times processes; kJ: the GPUs' energy of the measured "
        "windows and compiles only)."
    )
    failures = cells[cells["outcome"] != PASSED].sort_values(["backend", "outcome", "model"], kind="stable")
    failures = failures[["backend", "model", "outcome", "why", "cell_id"]].reset_index(drop=True)
    return [
        Table("suite", f"Suite {name}: pass rate and speedup per backend", data, text, note),
        Table(
            "suite_failures",
            f"Suite {name}: models that did not pass",
            failures,
            failures.astype(str),
            "One row per model and backend; why: the first error line (of the eager cell where eager "
            "failed).",
        ),
        _per_model(cells, name),
    ]


class Suite(Study):
    """The suite tables of a sweep run as a suite (`+suite=...`)."""

    def tables(self, loaded: Loaded) -> list[Table]:
        name = suite_name(loaded.sweep_dir)
        return suite_tables(loaded.training, loaded.data.steps, name) if name else []
