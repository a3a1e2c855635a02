"""The private Hydra and submitit APIs that compilebench uses, all wrapped in
orchestrator/grid/private_apis.py: each still exists with the expected signature and behaviour, and
pyproject.toml pins the versions they were tested with. A failure names the API, the installed
version and the tested range (an upgrade changed one of them: adapt its wrapper).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf
from submitit import SlurmExecutor

from orchestrator.grid import private_apis
from orchestrator.grid.expand import CONF_DIR, CONFIG_NAME

REPO_ROOT = Path(__file__).resolve().parents[3]


def versions(distribution: str) -> str:
    return (
        f"{distribution} {private_apis.installed(distribution)}, tested "
        f"{distribution}{private_apis.tested_range(distribution)}"
    )


def test_a_missing_api_names_itself_and_the_versions() -> None:
    """What an upgrade that removes a wrapped API looks like, at import of private_apis."""
    with pytest.raises(private_apis.PrivateApiError) as info:
        private_apis._load("hydra-core", "hydra._internal.core_plugins.basic_sweeper", "Gone")
    message = str(info.value)
    assert "hydra._internal.core_plugins.basic_sweeper.Gone" in message and "cannot be imported" in message
    assert re.search(r"hydra-core \S+; compilebench is tested with hydra-core>=1\.3\.2,<1\.4", message), (
        message
    )


def test_pyproject_pins_the_tested_versions() -> None:
    text = (REPO_ROOT / "pyproject.toml").read_text()
    for distribution in private_apis.TESTED:
        pins = re.findall(rf'"({re.escape(distribution)}\b[^"]*)"', text)
        assert pins == [f"{distribution}{private_apis.tested_range(distribution)}"], (
            f"pyproject.toml pins {pins}; orchestrator/grid/private_apis.py was tested with "
            f"{distribution}{private_apis.tested_range(distribution)}"
        )


# --- behaviour: what the wrappers are used for ---------------------------------------------------


@pytest.fixture
def loader():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield GlobalHydra.instance().config_loader()


def parse(loader, *lines: str) -> list:
    return OverridesParser.create(config_loader=loader).parse_overrides(list(lines))


def test_hydra_composition_wrappers(loader) -> None:
    try:
        assert private_apis.group_exists(loader, "backend") and not private_apis.group_exists(loader, "steps")
        cfg = private_apis.compose_groups(
            loader, CONFIG_NAME, parse(loader, "size=small", "backend=inductor")
        )
        assert "hydra" not in cfg and cfg.size == "small" and cfg.backend.name == "inductor"
        OmegaConf.set_struct(cfg, True)
        private_apis.apply_overrides(parse(loader, "steps=7", "+extra=1", "~data.workers"), cfg)
        assert cfg.steps == 7 and cfg.extra == 1 and "workers" not in cfg.data
    except Exception as exc:
        pytest.fail(
            f"Hydra's composition through orchestrator/grid/private_apis.py ({versions('hydra-core')}): "
            f"{type(exc).__name__}: {exc}",
            pytrace=False,
        )


def test_hydra_sweep_split(loader) -> None:
    jobs = private_apis.split_sweep(parse(loader, "seed=1,2", "size=tiny,small", "seed=3,4"))
    expected = [
        ["size=tiny", "seed=3"],
        ["size=tiny", "seed=4"],
        ["size=small", "seed=3"],
        ["size=small", "seed=4"],
    ]
    assert sorted(map(sorted, jobs)) == sorted(map(sorted, expected)), (
        f"BasicSweeper.split_arguments ({versions('hydra-core')}) now gives {jobs}"
    )


def test_hydra_job_overrides_are_what_the_parser_makes(loader) -> None:
    """Every string of every job, of sweeps of each kind of value, maps to exactly the override the
    parser makes of that string; a glob's values are the parser's (left out)."""
    sweep = parse(
        loader,
        "seed=range(3)",
        "optim.lr=range(0.1,0.3,0.1)",
        "+a=1,'2',null,true,x\\,y,'a b',007,inf",
        "++b.c=[1,'x'],{k: v}",
        "size@pkg=tiny,small",
        "warmup_steps=${steps},3",
        "~data.workers",
        "d=shuffle(choice(1.5,-2))",
        "e= spaced value ",
        "backend=glob(e*)",
    )
    jobs = private_apis.split_sweep(sweep)
    made = private_apis.job_overrides(sweep)
    strings = {line for job in jobs for line in job}
    globbed = {line for line in strings if line.startswith("backend=")}
    assert globbed == {"backend=eager"} and strings - globbed == set(made), (
        f"BasicSweeper.split_arguments ({versions('hydra-core')}) writes {sorted(strings)}; "
        f"made {sorted(made)}"
    )
    parser = OverridesParser.create(config_loader=loader)
    for line, override in made.items():
        assert override == parser.parse_override(line), (
            f"hydra.core.override_parser.types.Override ({versions('hydra-core')}) parses {line!r} as "
            f"{parser.parse_override(line)}, not {override}"
        )


def test_submitit_memory_format() -> None:
    got = [private_apis.convert_mem(gb) for gb in (120, 1, 1.5)]
    assert got == ["120GB", "1GB", "1536MB"], (
        f"submitit.slurm.slurm._convert_mem ({versions('submitit')}) gives {got}"
    )


def test_submitit_script_text(tmp_path: Path) -> None:
    """An array of 3 tasks throttled to 2, and a lone job without --array; never submitted."""
    params = {"job_name": "t", "partition": "p", "time": 5, "array_parallelism": 2, "setup": ["echo hi"]}
    texts = {}
    for count in (3, 1):
        executor = private_apis.RenderOnlyExecutor(folder=tmp_path / "submitit")
        executor.update_parameters(**params)
        texts[count] = private_apis.submission_script_text(executor, count)
    where = f"SlurmExecutor._make_submission_file_text ({versions('submitit')})"
    assert "#SBATCH --array=0-2%2" in texts[3] and "%A_%a" in texts[3], f"{where}: no job array:\n{texts[3]}"
    assert "--array" not in texts[1] and "#SBATCH --partition=p" in texts[1], f"{where}:\n{texts[1]}"
    assert "echo hi" in texts[1] and "submitit.core._submit" in texts[1], f"{where}:\n{texts[1]}"
    with pytest.raises(RuntimeError, match="does not submit"):
        private_apis.RenderOnlyExecutor(folder=tmp_path / "submitit").submit(print, "never")


def test_hydra_search_path_extension(loader, tmp_path: Path) -> None:
    """A site's config dir (`hydra.searchpath`) joins the loader's own repository: its cluster
    profile is a group option and composes."""
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "site.yaml").write_text(
        "defaults:\n  - /cluster_base@_here_\n  - _self_\nname: site\npartitions: {A100: a}\n"
    )
    private_apis.extend_search_path(loader, [f"file://{tmp_path}"])
    cfg = private_apis.compose_groups(loader, CONFIG_NAME, parse(loader, "cluster=site"))
    assert cfg.cluster.name == "site" and cfg.cluster.partitions == {"A100": "a"}, (
        f"ConfigLoaderImpl.repository.initialize_sources ({versions('hydra-core')})"
    )


def test_hydra_caching_repository_composes_as_hydra(loader) -> None:
    """Compositions through one caching repository equal fresh ones, also for a second selection."""
    repo = private_apis.caching_repository(loader)
    for selection in (["size=small"], ["size=tiny", "backend=inductor"], ["size=small"]):
        cached = private_apis.compose_groups(loader, CONFIG_NAME, parse(loader, *selection), repo)
        fresh = private_apis.compose_groups(loader, CONFIG_NAME, parse(loader, *selection))
        assert cached == fresh, f"CachingConfigRepository ({versions('hydra-core')}) differs for {selection}"


def test_submitit_submission_errors_are_what_a_refused_sbatch_raises(tmp_path: Path, monkeypatch) -> None:
    """An sbatch that refuses (a script first on PATH, as Slurm's client answers a bad partition)
    makes submitit raise one of SUBMISSION_ERRORS, which slurm_submit.py turns into one line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in (
        ("sbatch", "echo 'sbatch: error: invalid partition specified: nope' >&2; exit 1"),
        ("srun", "exit 0"),
    ):
        (bin_dir / tool).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    executor = SlurmExecutor(folder=tmp_path / "submitit")
    executor.update_parameters(time=1, partition="nope")
    with pytest.raises(private_apis.SUBMISSION_ERRORS) as info:
        executor.submit(print, "never")
    assert "invalid partition" in str(info.value), f"submitit ({versions('submitit')}): {info.value!r}"


# --- torch's private APIs of the GEMM cell (workloads/gemm/private_torch.py) ----------------------


def test_torch_private_apis_of_the_gemm_cell() -> None:
    """`_scaled_mm`'s schema, inductor's feedback savers and the two cache switches, as the wrappers
    use them; torch within the versions they were checked on (a newer one: check them, add it)."""
    import typing

    import torch
    from torch._functorch import config as functorch_config
    from torch._inductor import config as inductor_config
    from torch._inductor import select_algorithm

    from workloads.gemm import private_torch

    installed = tuple(int(part) for part in torch.__version__.split(".")[:2])
    checked = [tuple(int(part) for part in version.split(".")) for version in private_torch.CHECKED_TORCH]
    assert min(checked) <= installed <= max(checked), (
        f"torch {torch.__version__}; workloads/gemm/private_torch.py was checked on "
        f"{private_torch.CHECKED_TORCH}"
    )
    schema = str(torch.ops.aten._scaled_mm.default._schema)
    assert "Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b" in schema and "out_dtype" in schema
    arguments, _ = typing.get_args(select_algorithm.FeedbackFunction)
    assert len(arguments) == 6  # timings, name, input nodes, choices, profiled timings, precompile times
    assert callable(select_algorithm.add_feedback_saver) and callable(select_algorithm.clear_feedback_savers)
    assert isinstance(inductor_config.fx_graph_cache, bool)
    assert isinstance(functorch_config.enable_autograd_cache, bool)
    # The saver picks the fastest finite timing (milliseconds) and records it in µs.
    choices = private_torch.AutotuneChoices()
    fast, slow, broken = (type("Choice", (), {"name": name})() for name in ("triton_mm_1", "_scaled_mm", "x"))
    choices._save({slow: 0.1, fast: 0.05, broken: float("inf")}, "scaled_mm", [], [], dict, {})
    assert choices.last == private_torch.AutotuneChoice("triton_mm_1", 50.0)
