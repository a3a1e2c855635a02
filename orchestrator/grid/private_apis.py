"""Every use of a private Hydra or submitit API, each behind one function, in this one place.

compilebench follows Hydra's own multirun path and renders submitit's own sbatch text (see
orchestrator/grid/expand.py and orchestrator/executors/slurm/sbatch.py), and for a few steps of that
neither library has a public API. Each such step is wrapped here, with what it wraps, why no public API
does it, and the versions it was tested with (`TESTED`, the same ranges as the pins in pyproject.toml). Each
wrapper has a plain test of what it is used for (tests/unit/orchestrator/test_private_apis.py); an upgrade
that
removes one fails at import with a message that names the API, the installed version and the
tested range — not somewhere deep inside a sweep.

omegaconf needs no entry: compilebench uses only its public API.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from collections.abc import Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from hydra.core.override_parser.types import Override, Transformer, ValueType
from omegaconf import DictConfig
from submitit import SlurmExecutor

#: Distribution -> (lowest tested version, first untested version): the pins in pyproject.toml.
#: tests/unit/orchestrator/test_private_apis.py and the golden sbatch scripts passed with hydra-core 1.3.2
#: and 1.3.8,
#: submitit 1.5.0 and 1.5.4 (omegaconf 2.3.1).
TESTED: dict[str, tuple[str, str]] = {
    "hydra-core": ("1.3.2", "1.4"),
    "submitit": ("1.5.0", "1.6"),
}


class PrivateApiError(RuntimeError):
    """A wrapped private API is gone or changed; the message names it and the versions."""


def installed(distribution: str) -> str:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return "not installed"


def tested_range(distribution: str) -> str:
    low, high = TESTED[distribution]
    return f">={low},<{high}"


def _error(distribution: str, api: str, problem: str) -> PrivateApiError:
    return PrivateApiError(
        f"{api} ({distribution} {installed(distribution)}; compilebench is tested with "
        f"{distribution}{tested_range(distribution)}): {problem}. Adapt its wrapper in "
        f"orchestrator/grid/private_apis.py or install a tested version."
    )


def _load(distribution: str, module: str, name: str) -> Any:
    """`module.name`, or PrivateApiError naming it and the versions (at import of this module)."""
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise _error(distribution, f"{module}.{name}", f"cannot be imported ({exc})") from None


ConfigLoaderImpl = _load("hydra-core", "hydra._internal.config_loader_impl", "ConfigLoaderImpl")
CachingConfigRepository = _load("hydra-core", "hydra._internal.config_repository", "CachingConfigRepository")
IConfigRepository = _load("hydra-core", "hydra._internal.config_repository", "IConfigRepository")
BasicSweeper = _load("hydra-core", "hydra._internal.core_plugins.basic_sweeper", "BasicSweeper")
create_defaults_list = _load("hydra-core", "hydra._internal.defaults_list", "create_defaults_list")
DefaultsList = _load("hydra-core", "hydra._internal.defaults_list", "DefaultsList")
_convert_mem = _load("submitit", "submitit.slurm.slurm", "_convert_mem")
_make_sbatch_string = _load("submitit", "submitit.slurm.slurm", "_make_sbatch_string")
FailedJobError = _load("submitit", "submitit.core.utils", "FailedJobError")
FailedSubmissionError = _load("submitit", "submitit.core.utils", "FailedSubmissionError")


# --- Hydra (hydra-core 1.3) ---------------------------------------------------------------------


def apply_overrides(overrides: Sequence[Override], cfg: DictConfig) -> None:
    """Apply parsed plain (non-group) overrides to `cfg` in place, with Hydra's semantics of
    `key=v`, `+key=v`, `++key=v`, `~key`.

    Wraps `hydra._internal.config_loader_impl.ConfigLoaderImpl._apply_overrides_to_config`
    (static). Public Hydra applies overrides only while composing a whole config (`compose`,
    `load_configuration`, ~60 ms each); grid.py composes each selection of config groups once
    and applies each cell's plain overrides to a copy."""
    ConfigLoaderImpl._apply_overrides_to_config(list(overrides), cfg)


def group_exists(loader: Any, group: str) -> bool:
    """Whether `group` is a config group of the loader's search path (Hydra's own test of whether
    an override selects a config or sets a value).

    Wraps `ConfigLoaderImpl.repository.group_exists` (the repository is an attribute of the
    implementation, not of the public `ConfigLoader` interface, which has no such test)."""
    return bool(loader.repository.group_exists(group))


def extend_search_path(loader: Any, entries: Sequence[str]) -> None:
    """Give the loader's own repository the search path with these `hydra.searchpath` entries
    (the master config's), so that `group_exists` and `compose_groups` find their configs too.

    Hydra applies `hydra.searchpath` (`ConfigLoaderImpl._process_config_searchpath`) to a copy of
    the repository made for one composition (`CachingConfigRepository` deep-copies its delegate);
    grid.py composes the cells through the loader's repository. This builds the search path as
    that method does (the entries appended before the `schema` entry, from the public
    `ConfigLoader.get_search_path()`) and wraps `ConfigLoaderImpl.repository.initialize_sources`."""
    search_path = copy.deepcopy(loader.get_search_path())
    schema = search_path.get_path().pop(-1)
    if schema.provider != "schema":
        raise _error(
            "hydra-core", "ConfigLoader.get_search_path()", f"its last entry is {schema}, not the schema"
        )
    for entry in entries:
        search_path.append(provider="hydra.searchpath", path=entry)
    search_path.append(schema.provider, schema.path)
    loader.repository.initialize_sources(search_path)


class _SharedCache(CachingConfigRepository):
    """Hydra's cache, handing out a copy of each config of the root package (`cell_defaults`): Hydra
    merges such a config into the composed one without copying its nodes (`no_deepcopy_set_nodes`
    in `_compose_config_from_defaults_list`), so the groups merged after it would write into the
    cached nodes, and the next composition would start from the last one's values. A group's config
    (a path with a `/`) is copied by Hydra when it is put at its package. ~1 ms per composition."""

    def load_config(self, config_path: str) -> Any:
        loaded = super().load_config(config_path)
        if loaded is None or "/" in config_path:
            return loaded
        loaded = copy.copy(loaded)
        loaded.config = copy.deepcopy(loaded.config)
        return loaded


def caching_repository(loader: Any) -> Any:
    """A repository that loads each config file once, for several `compose_groups` calls of one
    expansion (Hydra makes one per composition; 40 group selections read every YAML file 40 times).
    The loaded results are only read: defaults lists are extracted at load, and composing merges
    copies of them into a new config (_SharedCache)."""
    return _SharedCache(loader.repository)


def compose_groups(
    loader: Any, config_name: str, group_overrides: Sequence[Override], repo: Any = None
) -> DictConfig:
    """The primary config `config_name` composed with these config-group overrides, without
    Hydra's own `hydra` node (no plain overrides applied; not struct, not resolved). `repo`: a
    `caching_repository` shared by the compositions of one expansion (default: a new one).

    Wraps `hydra._internal.config_repository.CachingConfigRepository`,
    `hydra._internal.defaults_list.create_defaults_list(..., prepend_hydra=False)` and
    `ConfigLoaderImpl._compose_config_from_defaults_list` — Hydra's own composition
    (`ConfigLoaderImpl._load_configuration_impl`) minus Hydra's ~10 configs of its own node,
    which were two thirds of the time. The public `compose`/`load_configuration` always
    compose the `hydra` node."""
    repo = repo if repo is not None else CachingConfigRepository(loader.repository)
    defaults = create_defaults_list(
        repo=repo,
        config_name=config_name,
        overrides_list=list(group_overrides),
        prepend_hydra=False,
        skip_missing=False,
    )
    return loader._compose_config_from_defaults_list(defaults=defaults.defaults, repo=repo)


def split_sweep(overrides: Sequence[Override]) -> list[list[str]]:
    """Every job of a sweep (the cartesian product of the sweep overrides) as its list of
    override strings, in Hydra's order; a later override of the same key replaces an earlier one.

    Wraps `hydra._internal.core_plugins.basic_sweeper.BasicSweeper.split_arguments(overrides,
    max_batch_size=None)[0]` (static). The public `BasicSweeper.sweep` launches the jobs; this is
    its expansion alone."""
    return BasicSweeper.split_arguments(list(overrides), max_batch_size=None)[0]


def job_overrides(overrides: Sequence[Override]) -> dict[str, Override]:
    """{string: parsed override} of every override string that `split_sweep(overrides)` puts in a
    job, made from the sweep's own parse and equal to what the parser makes of that string: each
    element of a sweep (the value of a plain override) becomes the value of an override of its key.
    Parsing each job's strings again cost ~0.15 ms a cell: a 10,000-cell dry run's cost per cell went
    0.36 -> 0.22 ms (2-core machine). A glob's values are left out (written unescaped, a name's
    meaning is the parser's to decide: parse those few).

    Sets the private field `Override._value` (the parsed value; `value()` drops a string's quotes) in
    a copy of the sweep's override, the rest as `OverridesParser.parse_override` sets it. The strings
    are `split_arguments`'s: the key element, `=`, and `Transformer.str` of the element."""
    by_line: dict[str, Override] = {}
    for override in overrides:
        if not override.is_sweep_override():
            elements: Iterable[Any] = [override._value]
        elif override.value_type is not ValueType.GLOB_CHOICE_SWEEP and override.is_discrete_sweep():
            elements = override.sweep_iterator()
        else:
            continue
        for element in elements:
            line = f"{override.get_key_element()}={Transformer.str(element)}"
            by_line[line] = dataclasses.replace(
                override, value_type=ValueType.ELEMENT, _value=element, input_line=line, config_loader=None
            )
    return by_line


# --- submitit 1.5 -------------------------------------------------------------------------------


def convert_mem(mem_gb: float) -> str:
    """A memory size in GB as submitit writes `--mem` (`120GB`, `1536MB` for 1.5).

    Wraps `submitit.slurm.slurm._convert_mem`, which SlurmExecutor applies to its own `mem_gb`
    parameter; `mem` (per node) takes a string, so compilebench converts the same way."""
    return _convert_mem(mem_gb)


class RenderOnlyExecutor(SlurmExecutor):
    """A SlurmExecutor that can be built where Slurm is not installed and never submits: it
    renders the script text of a dry run through the same submitit code a submission uses.

    Overrides `affinity` (public) and `PicklingExecutor._submit_command` (private: the one
    method that calls sbatch)."""

    @classmethod
    def affinity(cls) -> int:
        return 2  # SlurmExecutor refuses to exist without `srun` on PATH

    def _submit_command(self, command: str) -> Any:
        raise RuntimeError("RenderOnlyExecutor does not submit")


def submission_script_text(executor: SlurmExecutor, count: int) -> str:
    """The sbatch script `executor` submits for `count` calls (`map_array`): a job array
    (`--array=0-N%P`) when count > 1, a plain job for one.

    Wraps `SlurmExecutor._make_submission_file_text(executor._submitit_command_str, uid)` and
    the `map_count` parameter that `SlurmExecutor._internal_process_submissions` sets on its
    array executor (`update_parameters` refuses it). submitit has no public way to see the
    script without submitting it."""
    if count > 1:
        executor.parameters["map_count"] = count
    return executor._make_submission_file_text(executor._submitit_command_str, uid="")


#: What `SlurmExecutor.submit`/`map_array` raise when sbatch refuses or fails (submitit's
#: `submitit.core.utils`; the top-level `submitit` package does not export them).
SUBMISSION_ERRORS: tuple[type[BaseException], ...] = (FailedJobError, FailedSubmissionError)
