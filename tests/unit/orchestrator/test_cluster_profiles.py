"""Cluster profiles: one base (conf/cluster_base.yaml) that every profile inherits, whose values
are SlurmProfile's defaults; each profile states only what differs and composes to its site.

Fast: Hydra composition only.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from orchestrator.grid.expand import CONF_DIR, GridError, expand
from orchestrator.grid.profile import ProfileError, SlurmProfile, load_profile

BASE = CONF_DIR / "cluster_base.yaml"
INHERIT = "/cluster_base@_here_"

#: The resolved `cluster` of each profile when every profile still spelled out every key (before
#: the base existed; since issue 40 the GEMM cells on the H100s): the base must not change what a site
#: asks Slurm for.
SITE = {
    "partitions": {"A100": "grete:shared", "H100": "grete-h100"},
    "gpu_type_by_model": {"default": "A100", "gpt": "A100", "resnet": "H100", "timm": "H100", "gemm": "H100"},
}
SLURM_DEFAULTS = {
    "executor": "slurm",
    "gpu_type": None,
    "partition": None,
    "gpus": 1,
    "account": None,
    "qos": None,
    "max_requeue": 1,
    "signal_delay_s": 90,
    "compile_cache": "per_job",
    "sbatch_template": "default",
    "modules": [],
    "venv": None,
    "conda_env": None,
    "env": {},
    "setup": [],
    "sbatch_extra": {},
}
RESOLVED = {
    "grete": {
        **SLURM_DEFAULTS,
        **SITE,
        "name": "grete",
        "gpus_per_node": 4,
        "cpus_per_gpu": 16,
        "mem_per_gpu_gb": 120,
        "time_min": 60,
        "max_array_size": 1000,
        "array_parallelism": 16,
    },
    "test_slurm": {
        **SLURM_DEFAULTS,
        **SITE,
        "name": "test_slurm",
        "gpus_per_node": 2,
        "cpus_per_gpu": 1,
        "mem_per_gpu_gb": 1,
        "time_min": 10,
        "max_array_size": 1001,
        "array_parallelism": 4,
    },
    # local had only these keys; it now has the base's others too, at their defaults (checked below).
    "local": {
        "name": "local",
        "executor": "local",
        "partitions": {},
        "gpu_type": None,
        "gpus_per_node": 1,
        "compile_cache": "shared",
        "cpus_per_gpu": None,
        "mem_per_gpu_gb": None,
        "time_min": None,
        "account": None,
        "qos": None,
        "setup": [],
    },
}


def base() -> dict:
    """conf/cluster_base.yaml as Hydra composes it (a config without a defaults list of its own)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("cluster_base")
    return OmegaConf.to_container(cfg, resolve=False)


def profiles() -> list[str]:
    return sorted(p.stem for p in CONF_DIR.glob("cluster/*.yaml"))


def test_base_values_are_slurm_profile_defaults() -> None:
    """One default per key: what the base says is what load_profile assumes for an unset key."""
    values = base()
    fields = {f.name: f for f in dataclasses.fields(SlurmProfile)}
    assert set(values) == set(fields), (
        f"keys only in conf/cluster_base.yaml: {sorted(set(values) - set(fields))}, "
        f"only in SlurmProfile: {sorted(set(fields) - set(values))}"
    )
    for name, f in fields.items():
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "???"  # required: the base leaves it to each profile (OmegaConf's missing value)
        assert values[name] == default, (
            f"{name}: conf/cluster_base.yaml says {values[name]!r}, SlurmProfile {default!r}"
        )


@pytest.mark.parametrize("name", profiles())
def test_profile_inherits_the_base_and_states_only_what_differs(name: str) -> None:
    raw = yaml.safe_load((CONF_DIR / "cluster" / f"{name}.yaml").read_text())
    assert raw.pop("defaults") == [INHERIT, "_self_"], (
        f"{name}.yaml must start with defaults: [{INHERIT}, _self_]"
    )
    defaults = base()
    unknown = sorted(set(raw) - set(defaults))
    assert not unknown, f"{name}.yaml: keys the base does not have: {unknown}"
    restated = sorted(key for key, value in raw.items() if value == defaults[key])
    assert not restated, (
        f"{name}.yaml restates the base's default of {restated}; leave them to conf/cluster_base.yaml"
    )


@pytest.mark.parametrize("name", profiles())
def test_profile_composes_to_its_site(name: str) -> None:
    cluster = expand([f"cluster={name}"]).cluster
    assert set(cluster) == set(base())
    expected = RESOLVED.get(name)
    assert expected is not None, f"a new profile {name}: add what it resolves to to RESOLVED"
    assert {k: cluster[k] for k in expected} == expected
    defaults = base()
    assert {k: v for k, v in cluster.items() if k not in expected} == {
        k: defaults[k] for k in cluster if k not in expected
    }
    if cluster["executor"] == "slurm":
        load_profile(cluster)  # a complete, valid Slurm profile


def test_overrides_still_reach_every_key() -> None:
    cluster = expand(
        [
            "cluster=grete",
            "cluster.array_parallelism=2",
            "cluster.gpu_type_by_model.gpt=H100",
            "cluster.modules=[cuda/12.1]",
            "+cluster.env.NCCL_DEBUG=WARN",
        ]
    ).cluster
    assert cluster["array_parallelism"] == 2 and cluster["modules"] == ["cuda/12.1"]
    assert cluster["gpu_type_by_model"] == {**SITE["gpu_type_by_model"], "gpt": "H100"}
    assert cluster["env"] == {"NCCL_DEBUG": "WARN"}
    assert expand(["cluster=local", "cluster.time_min=30"]).cluster["time_min"] == 30


def test_the_base_is_no_cluster_of_its_own() -> None:
    with pytest.raises(GridError, match="cluster_base"):
        expand(["cluster=cluster_base"])


def test_a_profile_without_its_site_is_refused(tmp_path: Path) -> None:
    """The base's `???` keys: a profile that names neither itself nor its partitions is an error."""
    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "cluster" / "bare.yaml").write_text(f"defaults:\n  - {INHERIT}\n  - _self_\n\ntime_min: 5\n")
    with pytest.raises(GridError, match=r"cluster\.(name|partitions)"):
        expand(["cluster=bare"], config_dir=conf)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"time_min": "abc"}, "time_min: Value 'abc' of type 'str' could not be converted to Integer"),
        ({"gpus": True}, "gpus: Value 'True' of type 'bool' could not be converted to Integer"),
        ({"mem_per_gpu_gb": "lots"}, "mem_per_gpu_gb: Value 'lots' of type 'str' could not be converted"),
        ({"modules": "cuda/12.1"}, "modules: Invalid value assigned: str is not a ListConfig"),
        ({"partitions": ["grete:shared"]}, "partitions: Invalid type assigned: list is not a subclass"),
    ],
)
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key(change: dict, message: str) -> None:
    """SlurmProfile is OmegaConf's structured schema of a profile: its typing checks each value."""
    cluster = {**expand(["cluster=grete"]).cluster, **change}
    with pytest.raises(ProfileError) as info:
        load_profile(cluster)
    assert str(info.value).startswith(f"cluster grete: {message}") and "\n" not in str(info.value)


def test_a_value_that_converts_is_converted() -> None:
    """As OmegaConf converts: `cluster.time_min='30'` is 30 minutes, `mem_per_gpu_gb: 120` 120.0 GB."""
    profile = load_profile({**expand(["cluster=grete"]).cluster, "time_min": "30"})
    assert profile.time_min == 30 and profile.mem_per_gpu_gb == 120.0
    assert isinstance(profile.partitions, dict) and isinstance(profile.modules, list)
