"""The seminar report's tables filled from a generated sweep, beside the published values, and the
report's claims checked against it. Every number in the golden tables follows by hand from the
three measured steps each cell of tests/analysis_sweeps.write_seminar_sweep has, and from the
published values in analysis/reference/seminar_2024.csv."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from analysis.cells.metrics import cell_metrics
from analysis.reading.collect import load_sweep
from analysis.rendering.text import markdown
from analysis.studies.seminar.claims import AGREES, DISAGREES, INCONCLUSIVE, NO_DATA, check_claims
from analysis.studies.seminar.tables import SEMINAR_MODELS, load_reference, seminar_tables
from tests.helpers import REPO_ROOT
from tests.helpers.analysis_sweeps import H100, write_cell, write_seminar_sweep
from workloads.cell.config_io import cell_config_from_dict
from workloads.models import build_model

TABLE1_WITH_REFERENCE = """\
### Table 1: time per step (ms), μ and σ over measured steps

|                                            | gpt2 μ (ms)  | gpt2 σ | gpt2 published μ | gpt2 published σ | gpt2 change | shakespeare_char μ (ms) | shakespeare_char σ | shakespeare_char published μ | shakespeare_char published σ | shakespeare_char change |
| ------------------------------------------ | ------------ | ------ | ---------------- | ---------------- | ----------- | ----------------------- | ------------------ | ---------------------------- | ---------------------------- | ----------------------- |
| Eager                                      | 3010.000     | 10.000 | 3107.334         | 2.762            | -3.1%       | 17.000                  | 1.000              | 16.029                       | 2.666                        | +6.1%                   |
| Compiled (Cudagraphs backend)              | not_compiled |        | 3098.297         | 0.956            |             | not in sweep            |                    | 16.828                       | 3.935                        |                         |
| Compiled (Inductor backend)                | 2610.000     | 10.000 | 2640.227         | 5.773            | -1.1%       | 20.000                  | 1.000              | 12.191                       | 1.556                        | +64.1%                  |
| Compiled (Inductor backend) [max-autotune] | not in sweep |        |                  |                  |             | 13.000                  | 1.000              |                              |                              |                         |

Ours: NVIDIA H100 80GB HBM3; data: synthetic. Published: A100-80GB (change = ours / published - 1).
Cudagraphs: the published row measured eager: the report's code never used torch.compile's result."""  # noqa: E501

TABLE2_WITHOUT_REFERENCE = """\
### Table 2: MFU (%), μ and σ over measured steps

|                                            | gpt2 μ (%)   | gpt2 σ | shakespeare_char μ (%) | shakespeare_char σ |
| ------------------------------------------ | ------------ | ------ | ---------------------- | ------------------ |
| Eager                                      | 40.000       | 0.000  | 20.000                 | 0.000              |
| Compiled (Cudagraphs backend)              | not_compiled |        | not in sweep           |                    |
| Compiled (Inductor backend)                | 46.000       | 0.000  | 17.000                 | 0.000              |
| Compiled (Inductor backend) [max-autotune] | not in sweep |        | 26.000                 | 0.000              |

Ours: NVIDIA H100 80GB HBM3; data: synthetic."""  # noqa: E501

TABLE3_WITH_REFERENCE = """\
### Table 3: time per step (s), μ and σ over measured steps

|             | resnet34 μ (s) | resnet34 σ | resnet34 published μ | resnet34 published σ | resnet34 change | resnet18 μ (s) | resnet18 σ | resnet18 published μ | resnet18 published σ | resnet18 change |
| ----------- | -------------- | ---------- | -------------------- | -------------------- | --------------- | -------------- | ---------- | -------------------- | -------------------- | --------------- |
| Eager       | 0.250          | 0.010      | 0.243                | 0.101                | +2.9%           | 0.310          | 0.010      | 0.299                | 0.132                | +3.7%           |
| TorchScript | 0.250          | 0.010      | 0.229                | 0.097                | +9.2%           | 0.160          | 0.010      | 0.144                | 0.049                | +11.1%          |
| Inductor    | failed         |            | 0.205                | 0.099                |                 | 0.410          | 0.010      | 0.403                | 0.161                | +1.7%           |

Ours: NVIDIA H100 80GB HBM3; data: synthetic. Published: H100 (change = ours / published - 1)."""  # noqa: E501


@pytest.fixture(scope="module")
def metrics(tmp_path_factory: pytest.TempPathFactory):
    return cell_metrics(load_sweep(write_seminar_sweep(tmp_path_factory.mktemp("seminar")), warn=None))


@pytest.mark.parametrize("name", list(SEMINAR_MODELS))
def test_seminar_models_are_what_our_presets_build(name: str) -> None:
    """The mapping in analysis/studies/seminar/tables.py against the workloads' presets and the
    seminar experiments."""
    model = SEMINAR_MODELS[name]
    with torch.device("meta"):  # structure only: GPT-2's 124M parameters are never allocated
        spec = build_model(cell_config_from_dict({"model": {"name": model.model}, "size": model.size}))
    assert spec.arch == model.arch
    nanogpt = {"gpt2": (12, 40, (1024,)), "shakespeare_char": (64, 1, (256,))}  # the report's configs
    if name in nanogpt:
        assert (spec.batch_size, spec.grad_accum, spec.sample_shape) == nanogpt[name]
    experiment = "seminar_llm" if model.model == "gpt" else "seminar_cnn"
    experiment_file = REPO_ROOT / "conf" / "experiment" / f"{experiment}.yaml"
    params = yaml.safe_load(experiment_file.read_text())["hydra"]["sweeper"]["params"]
    assert params["model"] == model.model and model.size in params["size"].split(",")


def test_reference_data_is_packaged_with_its_source() -> None:
    reference = load_reference()
    assert list(reference.columns) == [
        "table",
        "metric",
        "unit",
        "model",
        "backend",
        "mean",
        "std",
        "gpu",
        "source",
    ]
    assert sorted(reference["table"].unique()) == [1, 2, 3] and len(reference) == 18
    assert reference["source"].str.contains("Table").all()
    assert "What's new with PyTorch?" in reference["source"].iloc[0]
    assert set(reference["model"]) == set(SEMINAR_MODELS)


def test_golden_tables(metrics) -> None:
    with_reference = {t.name: markdown(t) for t in seminar_tables(metrics, with_reference=True)}
    assert with_reference["seminar_table1"] == TABLE1_WITH_REFERENCE
    assert with_reference["seminar_table3"] == TABLE3_WITH_REFERENCE
    without = {t.name: markdown(t) for t in seminar_tables(metrics)}
    assert without["seminar_table2"] == TABLE2_WITHOUT_REFERENCE


def test_relative_change_is_ours_over_published(metrics) -> None:
    reference = load_reference().set_index(["table", "model", "backend"])
    compared = 0
    for table in seminar_tables(metrics, with_reference=True):
        for row in table.data.dropna(subset=["change"]).itertuples():
            published = reference.loc[(row.table, row.model, row.backend)]
            assert row.published_mean == published["mean"]
            assert row.change == pytest.approx(row.mean / published["mean"] - 1)
            compared += 1
    assert compared == 4 + 4 + 5  # Table 1, 2, 3: every completed cell of a published row


def test_claims_of_the_report_against_our_data(metrics) -> None:
    claims = check_claims(metrics).set_index("claim")
    verdicts = claims["verdict"].to_dict()
    assert verdicts == {
        "cudagraphs is faster than eager for gpt2": NO_DATA,  # ours: not_compiled
        "inductor is faster than eager for gpt2": AGREES,
        "cudagraphs is slower than eager for shakespeare_char": NO_DATA,  # not in the sweep
        "inductor is faster than eager for shakespeare_char": DISAGREES,  # ours: 20 ms against eager's 17
        "torchscript is faster than eager for resnet34": INCONCLUSIVE,  # the same step times
        "inductor is faster than eager for resnet34": NO_DATA,  # ours failed
        "torchscript is faster than eager for resnet18": AGREES,
        "inductor is slower than eager for resnet18": AGREES,  # the report's "anomalous" ResNet18
    }
    assert claims.loc["cudagraphs is faster than eager for gpt2", "ours"] == "no result (not_compiled)"
    assert "measured eager" in claims.loc["cudagraphs is faster than eager for gpt2", "note"]
    # With three steps per cell the interval's ends are ratios of extreme steps: 3000/2620 and 3020/2600.
    gpt2 = claims.loc["inductor is faster than eager for gpt2"]
    assert (gpt2["speedup_low"], gpt2["speedup_high"]) == (
        pytest.approx(3000 / 2620),
        pytest.approx(3020 / 2600),
    )


def test_settings_that_differ_split_rows_and_tables_need_cells(tmp_path: Path) -> None:
    r18 = dict(model="resnet", size="small", arch="resnet18", batch_size=128, **H100)
    write_cell(tmp_path, "tf32", "eager", step_ms=[300.0], precision="tf32", **r18)
    write_cell(tmp_path, "bf16", "eager", step_ms=[200.0], precision="bf16", **r18)
    write_cell(
        tmp_path, "timm", "eager", step_ms=[100.0], model="timm", size="tiny", arch="resnet18"
    )  # 64 px
    tables = seminar_tables(cell_metrics(load_sweep(tmp_path, warn=None)))
    assert [t.name for t in tables] == ["seminar_table3"]  # no gpt cell: no Table 1 or 2
    rows = tables[0].text.set_index("")
    assert rows.loc["Eager [precision=tf32]", "resnet18 μ (s)"] == "0.300"
    assert rows.loc["Eager [precision=bf16]", "resnet18 μ (s)"] == "0.200"
    assert len(rows) == 2  # resnet18 at timm's tiny preset is not the report's resnet18


def test_a_table_without_our_cells_shows_the_published_rows(tmp_path: Path) -> None:
    write_cell(tmp_path, "e", "eager", step_ms=[16.0], model="gpt", size="small", arch="gpt-6x6x384")
    tables = {
        t.name: t for t in seminar_tables(cell_metrics(load_sweep(tmp_path, warn=None)), with_reference=True)
    }
    table3 = tables["seminar_table3"].text
    assert list(table3[""]) == ["Eager", "TorchScript", "Inductor"]
    assert set(table3["resnet18 μ (s)"]) == {"not in sweep"} and set(table3["resnet18 published μ"]) == {
        "0.299",
        "0.144",
        "0.403",
    }
