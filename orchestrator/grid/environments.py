"""Named software environments of a cluster profile (`cluster.environments`) and their launchers.

An environment is a way to get a Python with torch: a venv, a conda environment, environment
modules, verbatim setup lines, or a container image run through a container runtime. The axis
`environment=NAME,...` sweeps them; a cell without one runs as before, in the Python that runs the
orchestrator's side of the job (the profile's own `modules`/`venv`/`conda_env`, unnamed).

A cell of a named environment runs `bash SWEEP_DIR/environments/NAME.sh -m workloads.run CONFIG
--repeat N` (orchestrator/executors/cell_process.py), locally and in a Slurm task alike: the
launcher sets the environment up with the site template's lines (orchestrator/grid/setup_lines.py),
the same that begin a job script, then the environment's `setup` lines, and execs its `python`.
Only the cell's process runs there, so the environment needs what `workloads` imports (torch,
numpy, pandas, pyarrow, pyyaml; timm for timm models), not the orchestrator (docs/clusters.md).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from orchestrator.grid.profile import ProfileError
from orchestrator.grid.setup_lines import template_lines, template_path
from workloads.contract.atomic import atomic_output
from workloads.contract.sweep_dir import environment_launcher

#: A name that is a file name and a plain Hydra value (`environment=torch2.11`): a letter first.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What runs a program inside `image` unless the environment says otherwise: Apptainer with the
#: node's NVIDIA driver and GPUs bound in.
CONTAINER_EXEC = "apptainer exec --nv"


@dataclass(frozen=True)
class Environment:
    """One entry of `cluster.environments` (conf/cluster_base.yaml documents the keys)."""

    modules: list[str] = field(default_factory=list)
    venv: str | None = None
    conda_env: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    setup: list[str] = field(default_factory=list)
    image: str | None = None
    container_exec: str = CONTAINER_EXEC

    def python_command(self) -> str:
        """The launcher's last line: the environment's `python`, inside its image where it has one."""
        if self.image is None:
            return 'exec python "$@"'
        return f'exec {self.container_exec} {shlex.quote(self.image)} python "$@"'


_KEYS = tuple(f.name for f in fields(Environment))


def _fail(profile: str, message: str) -> ProfileError:
    return ProfileError(f"cluster {profile}: {message}")


def _environment(profile: str, name: str, values: Any) -> Environment:
    where = f"environments.{name}"
    if not _NAME.fullmatch(name):
        raise _fail(profile, f"{where}: a name starts with a letter and has letters, digits, _ . - only")
    if not isinstance(values, Mapping):
        raise _fail(profile, f"{where} must map keys ({', '.join(_KEYS)}) to values, got {values!r}")
    unknown = sorted(set(values) - set(_KEYS))
    if unknown:
        raise _fail(profile, f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(_KEYS)}")
    given = {key: value for key, value in values.items() if value is not None}
    for key in ("modules", "setup"):
        lines = given.get(key, [])
        if not isinstance(lines, list) or not all(isinstance(x, str) and "\n" not in x for x in lines):
            raise _fail(profile, f"{where}.{key} must be a list of one-line strings, got {lines!r}")
    for key in ("venv", "conda_env", "image", "container_exec"):
        if key in given and not (isinstance(given[key], str) and given[key].strip()):
            raise _fail(profile, f"{where}.{key} must be a non-empty string, got {given[key]!r}")
    variables = given.get("env", {})
    if not isinstance(variables, Mapping) or not all(_VARIABLE.fullmatch(str(k)) for k in variables):
        raise _fail(profile, f"{where}.env must map variable names to values, got {variables!r}")
    given["env"] = {str(k): str(v) for k, v in variables.items()}
    environment = Environment(**given)
    if not any((environment.modules, environment.venv, environment.conda_env, environment.setup)) and (
        environment.image is None
    ):
        raise _fail(profile, f"{where} says nothing: give venv, conda_env, modules, image or setup")
    return environment


def environments_of(cluster: Mapping[str, Any]) -> dict[str, Environment]:
    """The checked named environments of a composed `cluster` node; raises ProfileError."""
    profile = str(cluster.get("name", "?"))
    values = cluster.get("environments") or {}
    if not isinstance(values, Mapping):
        raise _fail(profile, f"environments must map names to environments, got {values!r}")
    return {str(name): _environment(profile, str(name), spec) for name, spec in values.items()}


def check_cell_environments(cluster: Mapping[str, Any], names: Iterable[str | None]) -> None:
    """Raise ProfileError (one line) for a cell's environment that the profile does not define."""
    defined = environments_of(cluster)
    wanted = sorted({name for name in names if name is not None})
    unknown = [name for name in wanted if name not in defined]
    if not unknown:
        return
    profile = cluster.get("name", "?")
    have = f"its environments: {', '.join(defined)}" if defined else "it defines none: cluster.environments"
    raise _fail(profile, f"environment={','.join(unknown)} is not defined ({have}; docs/clusters.md)")


def launcher_text(cluster: Mapping[str, Any], name: str) -> str:
    """The launcher script of environment `name` of this profile: its setup, then its Python."""
    environment = environments_of(cluster)[name]
    profile = str(cluster.get("name", "?"))
    template = template_path(str(cluster.get("sbatch_template") or "default"), profile)
    lines = [
        "#!/bin/bash",
        f"# compilebench environment {name} of cluster {profile}: each cell of environment={name}",
        '# runs `bash THIS -m workloads.run CONFIG --repeat N`; "$@" goes to the environment\'s python.',
        "set -e",
        *template_lines(template, environment),
        *environment.setup,
        environment.python_command(),
    ]
    return "\n".join(lines) + "\n"


def write_launchers(sweep_dir: Path, cluster: Mapping[str, Any], names: Iterable[str | None]) -> list[Path]:
    """Write the launcher of each of these environments into SWEEP_DIR/environments/."""
    paths = []
    for name in sorted({name for name in names if name is not None}):
        path = environment_launcher(sweep_dir, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_output(path) as fh:
            fh.write(launcher_text(cluster, name).encode())
        paths.append(path)
    return paths
