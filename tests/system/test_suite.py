"""Suite mode (`+suite=...`, conf/suite/, analysis/studies/suite.py): the timm preset expands to one cell per
listed model and backend in one job array, narrowed on the command line, and a suite of one's own
composes; the suite tables' arithmetic on a hand-made sweep;
and `+suite=timm_smoke` run for real on the CPU (real timm models, real aot_eager), its failing
model named in the suite table.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from analysis.report import analyze
from analysis.studies.suite import suite_tables
from orchestrator.cli.main import main
from orchestrator.grid.expand import expand
from tests.helpers import cli, table
from tests.helpers.analysis_sweeps import write_cell

#: Families the model zoo must cover, by the prefix of their timm names.
FAMILIES = (
    "resnet",
    "resnext",
    "efficientnet",
    "mobilenet",
    "convnext",
    "regnet",
    "vit_",
    "deit_",
    "swin_",
    "mixer_",
)


def test_timm_train_preset_expands_to_one_cell_per_model_and_backend(
    capsys, no_slurm_here, tmp_path: Path
) -> None:
    import timm

    cells = expand(["+suite=timm_train"]).cells
    archs = sorted({cell.axes["arch"] for cell in cells})
    assert len(archs) == 44 and set(archs) <= set(timm.list_models())
    assert all(any(arch.startswith(family) for arch in archs) for family in FAMILIES)
    pairs = sorted((cell.axes["arch"], cell.axes["backend"]) for cell in cells)
    assert pairs == sorted((arch, backend) for arch in archs for backend in ("eager", "inductor"))
    for cell in cells:
        config = cell.config
        assert (
            config["model"]["name"],
            config["size"],
            config["precision"]["name"],
            config["batch_size"],
            config["suite"],
        ) == ("timm", "small", "bf16", 128, {"name": "timm_train"})

    # On a Slurm site every cell asks for the same resources: one job array of 88 tasks.
    code = main(["sweep", "+suite=timm_train", "cluster=grete", "hydra.sweep.dir=sw", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "88 cell(s): 88 in 1 job array(s)" in out
    assert "#SBATCH --array=0-87%16" in (tmp_path / "sw" / "sbatch" / "dryrun-00.sh").read_text()


def test_a_suite_narrowed_on_the_command_line_and_a_suite_of_your_own(no_slurm_here, tmp_path: Path) -> None:
    """docs/suites.md: `model.arch=` overrides the preset's list; a `suite/<name>.yaml` in a config
    directory of one's own is a suite like the shipped ones."""
    narrowed = expand(["+suite=timm_train", "model.arch=resnet50,fbnetv3_b"]).cells
    assert sorted((c.axes["arch"], c.axes["backend"]) for c in narrowed) == [
        ("fbnetv3_b", "eager"),
        ("fbnetv3_b", "inductor"),
        ("resnet50", "eager"),
        ("resnet50", "inductor"),
    ]

    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "my_zoo.yaml").write_text("""# @package _global_
suite:
  name: my_zoo
hydra:
  sweeper:
    params:
      model: timm
      model.arch: resnet18,convnext_tiny,vit_small_patch16_224
      size: small
      backend: eager,inductor
""")
    cells = expand(["+suite=my_zoo"], config_dirs=[tmp_path]).cells
    assert len(cells) == 6 and {c.axes["arch"] for c in cells} == {
        "resnet18",
        "convnext_tiny",
        "vit_small_patch16_224",
    }
    assert all(c.config["suite"] == {"name": "my_zoo"} for c in cells)


def _model(sweep: Path, arch: str, eager: dict, compiled: dict) -> None:
    """An eager and an inductor cell of one timm model (three measured steps each)."""
    for backend, cell in (("eager", eager), ("inductor", compiled)):
        write_cell(sweep, f"{arch}-{backend}", backend, model="timm", arch=arch, **cell)


def test_suite_table_arithmetic(tmp_path: Path) -> None:
    """Eight models, one of each outcome and one whose compile came from the cache; the numbers
    worked out by hand."""
    sweep = tmp_path / "sweep"
    done = lambda ms, **run: {"step_ms": [ms] * 3, **run}  # noqa: E731
    _model(sweep, "a", done(100.0, peak_mem_bytes=1000), done(50.0, compile_time_s=10.0, peak_mem_bytes=500))
    _model(
        sweep, "b", done(100.0, peak_mem_bytes=1000), done(125.0, compile_time_s=20.0, peak_mem_bytes=1000)
    )
    _model(sweep, "c", done(100.0), {"status": "failed", "error": "BackendCompilerFailed: boom\nmore"})
    _model(
        sweep,
        "d",
        {"status": "failed", "error": "RuntimeError: eager broke"},
        {"status": "failed", "error": "x"},
    )
    _model(sweep, "e", done(100.0), {"status": "oom", "error": "OutOfMemoryError: CUDA out of memory"})
    _model(sweep, "f", done(100.0, loss=[4.0] * 5), done(90.0, loss=[4.0, 4.2, 4.0, 4.0, 4.0]))
    _model(sweep, "g", done(100.0), {"status": "not_compiled", "step_ms": [100.0] * 3})
    _model(
        sweep,
        "h",
        done(100.0, peak_mem_bytes=1000),
        done(100.0, compile_time_s=2.0, fx_graph_cache_hits=2, peak_mem_bytes=1000),
    )

    result = analyze(sweep, warn=None)
    assert "suite" not in [t.name for t in result.tables]  # a sweep that is no suite has no suite table
    for config in sweep.glob("cells/*/config.yaml"):  # as conf/suite/*.yaml gives every cell
        config.write_text(config.read_text() + yaml.safe_dump({"suite": {"name": "hand"}}))
    suite, failures, per_model = (t for t in analyze(sweep, warn=None).tables if t.name.startswith("suite"))
    assert suite_tables(result.metrics, result.data.steps, "hand")[0].data.equals(suite.data)

    (row,) = suite.data.to_dict("records")
    assert (row["backend"], row["models"], row["passed"], row["pass_rate"]) == (
        "inductor",
        8,
        3,
        pytest.approx(3 / 8),
    )
    counts = {
        k: row[k]
        for k in (
            "fails accuracy",
            "compile error",
            "not compiled",
            "OOM",
            "timeout",
            "eager failed",
            "no result",
        )
    }
    assert counts == {
        "fails accuracy": 1,
        "compile error": 1,
        "not compiled": 1,
        "OOM": 1,
        "timeout": 0,
        "eager failed": 1,
        "no result": 0,
    }
    assert row["geomean_speedup"] == pytest.approx((2.0 * 0.8 * 1.0) ** (1 / 3))  # a: 2x, b: 0.8x, h: 1x
    assert row["geomean_speedup_clipped"] == pytest.approx(2.0 ** (1 / 3))  # b counts as 1x
    assert row["slower_share"] == pytest.approx(1 / 3)
    # h's 2 s compile found its graphs in the cache: counted as such, not as a cold compile.
    assert (row["compile_s_median"], row["compile_s_p90"]) == (pytest.approx(15.0), pytest.approx(19.0))
    assert row["compiled_from_cache"] == 1
    assert row["peak_mem_ratio_geomean"] == pytest.approx(0.5 ** (1 / 3))
    text = suite.text.iloc[0]
    assert (text["pass rate"], text["geomean speedup"], text["geomean clipped ≥1"]) == (
        "37.5% (3 of 8)",
        "1.17x",
        "1.26x",
    )

    named = {(r["model"], r["outcome"]): r["why"] for r in failures.data.to_dict("records")}
    assert named == {
        ("c", "compile error"): "BackendCompilerFailed: boom",
        ("d", "eager failed"): "eager failed: RuntimeError: eager broke",
        ("e", "OOM"): "OutOfMemoryError: CUDA out of memory",
        ("f", "fails accuracy"): "loss 5.0% off eager's in the first 3 steps (no accuracy check)",
        ("g", "not compiled"): "",
    }

    # Every model, the passed ones fastest first, then the others.
    assert per_model.text["model"].tolist()[:3] == ["a", "h", "b"]
    assert sorted(per_model.text["model"].tolist()[3:]) == ["c", "d", "e", "f", "g"]
    first, cached = per_model.text.iloc[0], per_model.text.iloc[1]
    assert first["speedup [95% CI]"].startswith("2.00x") and first["compile s"] == "10.00"
    assert (cached["compile s"], cached["peak mem vs eager"]) == ("from cache", "1.000")


def test_the_accuracy_check_decides_where_a_cell_has_one(tmp_path: Path) -> None:
    """A cell whose check failed fails accuracy with the check's numbers, even with equal early losses;
    a cell whose check passed passes, even with early losses 5% apart (dropout draws differ between
    eager and compiled training; the check turns it off); the early losses decide only without one."""
    sweep = tmp_path / "sweep"
    same, apart = [4.0] * 5, [4.0, 4.2, 4.0, 4.0, 4.0]
    failed = {"accuracy": "fail_accuracy", "accuracy_rel_diff": 0.031, "accuracy_noise_floor": 0.0004}
    for arch, compiled_loss, check in (("failed", same, failed), ("passed", apart, {"accuracy": "pass"})):
        _model(
            sweep,
            arch,
            {"step_ms": [100.0] * 3, "loss": same},
            {"step_ms": [80.0] * 3, "loss": compiled_loss, **check},
        )
    for config in sweep.glob("cells/*/config.yaml"):
        config.write_text(config.read_text() + yaml.safe_dump({"suite": {"name": "hand"}}))
    result = analyze(sweep, warn=None)
    suite, failures, _ = suite_tables(result.metrics, result.data.steps, "hand")
    (row,) = suite.data.to_dict("records")
    assert (row["passed"], row["fails accuracy"]) == (1, 1)
    assert failures.data[["model", "outcome", "why"]].values.tolist() == [
        [
            "failed",
            "fails accuracy",
            "accuracy check: fail_accuracy (0.031; eager 0.0004)",
        ]
    ]


def test_peak_memory_is_against_a_paired_cells_own_eager_side(tmp_path: Path) -> None:
    """A paired cell's peak is its compiled blocks', its eager side's beside it (issue 38): the ratio is
    against that, not the eager cell's; a paired cell without one (the CPU's process peak, older
    sweeps) has no ratio, and the suite's mean says it rests on the others."""
    sweep = tmp_path / "sweep"
    done = lambda peak, **run: {"step_ms": [100.0] * 3, "peak_mem_bytes": peak, **run}  # noqa: E731
    _model(sweep, "unpaired", done(1000), done(500))
    _model(sweep, "paired", done(1000), done(400, paired=True, eager_peak_mem_bytes=1600))
    _model(sweep, "older", done(1000), done(1000, paired=True))
    for config in sweep.glob("cells/*/config.yaml"):
        config.write_text(config.read_text() + yaml.safe_dump({"suite": {"name": "hand"}}))
    result = analyze(sweep, warn=None)
    suite, _, per_model = suite_tables(result.metrics, result.data.steps, "hand")
    ratios = dict(zip(per_model.data["model"], per_model.data["peak_mem_ratio"]))
    assert ratios["unpaired"] == 0.5 and ratios["paired"] == 0.25 and np.isnan(ratios["older"])
    (row,) = suite.data.to_dict("records")
    assert (row["passed"], row["peak_mem_models"]) == (3, 2)
    assert row["peak_mem_ratio_geomean"] == pytest.approx((0.5 * 0.25) ** 0.5)
    assert suite.text.iloc[0]["peak mem vs eager"] == "0.354 (2 of 3)"


def test_timm_smoke_suite_on_the_cpu(capsys, tmp_path: Path) -> None:
    """Real timm models, real aot_eager on the CPU through the command line; the model that fails on
    purpose (a fixed-224-px ViT at 32 px) is counted and named."""
    result = cli(tmp_path, "sweep", "+suite=timm_smoke", "hydra.sweep.dir=sw", timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr  # the failing model's two cells
    assert "4 completed, 0 already completed, 2 failed" in result.stdout

    assert main(["analyze", str(tmp_path / "sw"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    suite = out.split("### Suite timm_smoke: pass rate and speedup per backend")[1].split("###")[0]
    (row,) = table(suite.replace("| backend ", "| cell_id ", 1)).values()
    assert (row["cell_id"], row["pass rate"], row["eager failed"], row["compile error"]) == (
        "aot_eager",
        "66.7% (2 of 3)",
        "1",
        "0",
    )
    assert row["geomean speedup"].endswith("x") and row["compile s median"]
    failures = out.split("### Suite timm_smoke: models that did not pass")[1].split("###")[0]
    (failed,) = table(failures.replace("| backend ", "| cell_id ", 1)).values()
    assert (failed["model"], failed["outcome"]) == ("vit_tiny_patch16_224", "eager failed")
    assert "Input height (32) doesn't match model (224)" in failed["why"]
