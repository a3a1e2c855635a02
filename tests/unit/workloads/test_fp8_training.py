"""precision=fp8 on the CPU (workloads/cell/fp8.py): which Linear layers torchao's float8 training
swaps (real Float8Linear modules; the swap needs no fp8 matmul), the refusals before anything is
submitted (a partition's GPU type without fp8, device=cpu, no torchao), torchao absent in the
cell's own process, and a real fp8 cell on the CPU recorded `not_supported`, which
`status --retry-failed` leaves alone. Training in fp8 needs an H100: tests/gpu/test_gpu_tier.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch.nn as nn
from torchao.float8.float8_linear import Float8Linear

from analysis.report import analyze
from analysis.studies.suite import outcomes
from tests.helpers import REPO_ROOT, TINY, cli, cli_env, table
from tests.helpers.analysis_sweeps import write_cell
from workloads.cell.config_io import cell_config_from_dict
from workloads.cell.fp8 import MISSING_TORCHAO, import_float8, swap_linears
from workloads.cell.support import NotSupported, require_fp8
from workloads.models import build_model

#: A tiny fp8 cell; the sweep's device is `auto` (device=cpu is refused at plan time), kept on the
#: CPU by hiding any GPU, so that the cell itself finds out.
FP8 = [*(o for o in TINY if not o.startswith(("precision=", "device="))), "precision=fp8", "backend=eager"]
ON_THE_CPU = {"CUDA_VISIBLE_DEVICES": ""}


def _without_torchao(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import torchao, as where the extra is not installed."""
    shim = tmp_path / "no_torchao"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['torchao'] = None\n")
    return {"PYTHONPATH": f"{shim}:{REPO_ROOT}"}


def _cell(model: str, **overrides: object):
    return cell_config_from_dict({"model": {"name": model}, "size": "tiny", **overrides})


def test_the_swap_converts_aligned_linears_and_never_the_output_head() -> None:
    float8 = import_float8()
    for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        spec = build_model(_cell("gpt"))
        spec.module.extra = nn.Linear(64, 24)  # 24 wide: torch._scaled_mm needs multiples of 16
        columns = swap_linears(float8, spec.module, recipe, spec.output_head)
        kinds = {name: type(m) for name, m in spec.module.named_modules() if isinstance(m, nn.Linear)}
        swapped = {name for name, kind in kinds.items() if kind is Float8Linear}
        assert spec.output_head == "lm_head" and kinds["lm_head"] is nn.Linear and kinds["extra"] is nn.Linear
        assert swapped == {
            f"transformer.h.{i}.{layer}"
            for i in range(2)
            for layer in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")
        }
        assert columns == {"fp8_linears": 8, "fp8_skipped_head": 1, "fp8_skipped_misaligned": 1}
        assert spec.module.lm_head.weight is spec.module.transformer.wte.weight  # still tied


def test_a_timm_models_output_head_is_its_classifier() -> None:
    spec = build_model(_cell("resnet"))
    assert spec.output_head == "fc" and spec.module.get_submodule("fc") is spec.module.get_classifier()


def test_a_model_registered_with_timm_needs_no_classifier_method() -> None:
    # A user's model in timm's registry may lack timm's get_classifier: it has no output head to spare.
    import timm
    from timm.models import register_model

    name = "compilebench_test_no_get_classifier"
    if name not in timm.list_models():

        def create(pretrained: bool = False, num_classes: int = 10, **kwargs: object) -> nn.Module:
            return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, num_classes))

        create.__name__ = name
        register_model(create)
    cfg = cell_config_from_dict({"model": {"name": "timm", "arch": name}, "size": "tiny"})
    assert build_model(cfg).output_head is None


def test_the_cpu_has_no_fp8() -> None:
    import torch

    with pytest.raises(NotSupported, match="runs on the cpu"):
        require_fp8(torch.device("cpu"))


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["cluster=grete", "model=gpt"], "GPU type A100 has 8.0"),  # gpt goes to Grete's A100 partition
        (["model=gpt", "size=tiny", "device=cpu"], "asks for device=cpu"),
    ],
)
def test_refused_before_anything_is_submitted(tmp_path: Path, overrides: list[str], says: str) -> None:
    result = cli(tmp_path, "sweep", *overrides, "precision=fp8", "--dry-run")
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and says in result.stderr
    assert not (tmp_path / "sweeps").exists() or not list((tmp_path / "sweeps").rglob("*.sh"))


def test_an_fp8_partition_takes_the_cell(tmp_path: Path) -> None:
    result = cli(tmp_path, "sweep", "cluster=grete", "model=resnet", "precision=fp8", "--dry-run")
    assert result.returncode == 0, result.stderr  # resnet goes to Grete's H100 partition


def test_torchao_absent_at_plan_time_and_in_the_cell(tmp_path: Path) -> None:
    env = _without_torchao(tmp_path)
    planned = cli(tmp_path, "sweep", *FP8, "--dry-run", env=env)
    assert planned.returncode == 2 and planned.stderr.strip().splitlines() == [
        f"error: {' '.join(FP8)}: {MISSING_TORCHAO}"
    ]
    # The cell's own process on an fp8 GPU (a config written by a sweep that could import torchao) says
    # so too, through the import it makes after the device check (a CPU cell is not_supported first).
    imported = subprocess.run(
        [sys.executable, "-c", "from workloads.cell.fp8 import import_float8; import_float8()"],
        cwd=tmp_path,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert imported.returncode != 0 and MISSING_TORCHAO in imported.stderr, imported.stderr


def test_an_fp8_cell_on_the_cpu_is_not_supported_and_not_retried(tmp_path: Path) -> None:
    swept = cli(tmp_path, "sweep", *FP8, "hydra.sweep.dir=sw", env=ON_THE_CPU)
    assert swept.returncode == 0 and "0 failed, 1 not supported here" in swept.stdout, (
        swept.stdout + swept.stderr
    )
    status = cli(tmp_path, "status", "sw")
    (row,) = table(status.stdout).values()
    assert (row["precision"], row["state"]) == ("fp8", "not_supported"), status.stdout
    retried = cli(tmp_path, "status", "sw", "--retry-failed", env=ON_THE_CPU)
    assert retried.returncode == 0 and "nothing to retry" in retried.stdout, retried.stdout + retried.stderr
    (run_file,) = (tmp_path / "sw" / "cells").glob("*/run.parquet")
    runs = pd.read_parquet(run_file)
    assert runs["status"].tolist() == ["not_supported"] and "runs on the cpu" in runs["error"].iloc[0]


def test_the_suite_calls_it_not_supported(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    error = "precision=fp8 needs fp8 tensor cores (compute capability >= 8.9); NVIDIA A100 has 8.0"
    for backend in ("eager", "inductor"):
        write_cell(
            sweep, f"a-{backend}", backend, status="not_supported", error=error, model="timm", arch="a"
        )
    result = analyze(sweep, warn=None)
    (row,) = outcomes(result.metrics, result.data.steps).to_dict("records")
    assert row["outcome"] == "not supported" and error.startswith(row["why"].rstrip("…"))
