"""How a job or a cell's process gets its software: the site template's setup lines, and the named
environments of a cluster profile (`cluster.environments`) with their launchers.

The site template (`sbatch_templates/<name>.sh.tmpl`, its rules in sbatch_templates/README.md:
`{field}` placeholders, every value shell-quoted, a list repeating its line, a mapping per entry)
is filled from the profile's own `modules`, `venv`, `conda_env` and `env` at the start of a job
script's `# setup` section (orchestrator/executors/slurm/sbatch.py), and from a named
environment's at the start of its launcher.

An environment is a way to get a Python with torch: a venv, a conda environment, environment
modules, verbatim setup lines, or a container image run through a container runtime. The axis
`environment=NAME,...` sweeps them; a cell without one runs as before, in the Python that runs the
orchestrator's side of the job (the profile's own `modules`/`venv`/`conda_env`, unnamed).
A cell of a named environment runs `bash SWEEP_DIR/environments/NAME.sh -m workloads.run CONFIG
--repeat N` (orchestrator/executors/cell_process.py), locally and in a Slurm task alike: the
launcher sets the environment up with the template's lines, then the environment's `setup` lines,
and execs its `python`. Only the cell's process runs there, so the environment needs what
`workloads` imports (torch, numpy, pandas, pyarrow, pyyaml; timm for timm models), not the
orchestrator (docs/clusters.md, "Software environments").
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from orchestrator.grid.package_data import TEMPLATES_DIR
from orchestrator.grid.profile import VARIABLE_NAME, ProfileError
from workloads.contract.atomic import atomic_output
from workloads.contract.sweep_dir import environment_launcher

TEMPLATE_SUFFIX = ".sh.tmpl"

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:\.(name|value))?\}")


def template_path(name: str, profile: str) -> Path:
    """The template `name` (`default`, or a path with a `/`) of cluster `profile`; ProfileError if none."""
    path = Path(name).expanduser() if "/" in name else TEMPLATES_DIR / f"{name}{TEMPLATE_SUFFIX}"
    if not path.is_file():
        known = ", ".join(
            sorted(p.name[: -len(TEMPLATE_SUFFIX)] for p in TEMPLATES_DIR.glob(f"*{TEMPLATE_SUFFIX}"))
        )
        raise ProfileError(f"cluster {profile}: sbatch_template {name!r} not found ({path}); known: {known}")
    return path


def _entries(fields: Any, name: str, template: Path) -> list[Any]:
    """The values one template line is repeated for: [] drops the line."""
    if not hasattr(fields, name):
        raise ProfileError(f"{template}: unknown profile field {{{name}}}")
    value = getattr(fields, name)
    if name == "venv" and value:
        value = os.path.expanduser(value)  # inside quotes the shell would not expand `~`
    if value is None or value == "" or value == [] or value == {}:
        return []
    if isinstance(value, Mapping):
        return list(value.items())
    return list(value) if isinstance(value, list) else [value]


def _fill(line: str, entry: Any, template: Path) -> str:
    def one(match: re.Match) -> str:
        part = match.group(2)
        if isinstance(entry, tuple) != (part is not None):
            raise ProfileError(f"{template}: {match.group(0)} does not fit the value {entry!r}")
        value = entry if part is None else entry[0 if part == "name" else 1]
        return shlex.quote(str(value))

    return _PLACEHOLDER.sub(one, line)


def template_lines(template: Path, fields: Any) -> list[str]:
    """The template filled from `fields` (a profile, or an environment: an object with the
    template's field names as attributes)."""
    lines = []
    for line in template.read_text().splitlines():
        if line.startswith("##") or not line.strip():
            continue
        names = {match.group(1) for match in _PLACEHOLDER.finditer(line)}
        if len(names) > 1:
            raise ProfileError(f"{template}: one profile field per line, got {sorted(names)} in {line!r}")
        if not names:
            lines.append(line)
            continue
        lines += [_fill(line, entry, template) for entry in _entries(fields, names.pop(), template)]
    return lines


#: Where Environment Modules lives when MODULESHOME is not set (Debian's `environment-modules`).
MODULES_HOME = "/usr/share/modules"
#: The launcher's first lines where the environment has `modules`: `module` is a shell function that
#: a login shell gets from /etc/profile.d and exports to its children (Environment Modules and Lmod
#: do by default), so a cell started by no login shell (cron, `sbatch --export=NONE`, CI) has none
#: and would fail on "module: command not found"; it sources $MODULESHOME/init/bash instead (both
#: implementations set MODULESHOME and have that file).
MODULES_INIT = (
    "if ! type module >/dev/null 2>&1; then  # no login shell passed `module` on: its bash init",
    f'  modules_init="${{MODULESHOME:-{MODULES_HOME}}}/init/bash"',
    '  [[ -f $modules_init ]] || { echo "module: not defined, nor $modules_init" >&2; exit 1; }',
    '  source "$modules_init"',
    "fi",
)

#: A name that is a file name and a plain Hydra value (`environment=torch2.11`): a letter first.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")
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
    if not isinstance(variables, Mapping) or not all(VARIABLE_NAME.fullmatch(str(k)) for k in variables):
        raise _fail(profile, f"{where}.env must map variable names to values, got {variables!r}")
    given["env"] = {str(k): str(v) for k, v in variables.items()}
    if not any(given.get(key) for key in ("modules", "venv", "conda_env", "setup", "image")):
        raise _fail(profile, f"{where} says nothing: give venv, conda_env, modules, image or setup")
    return Environment(**given)


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


def launcher_text(cluster: Mapping[str, Any], name: str, environment: Environment) -> str:
    """The launcher script of this profile's environment `name`: its setup, then its Python."""
    profile = str(cluster.get("name", "?"))
    template = template_path(str(cluster.get("sbatch_template") or "default"), profile)
    lines = [
        "#!/bin/bash",
        f"# compilebench environment {name} of cluster {profile}: each cell of environment={name}",
        '# runs `bash THIS -m workloads.run CONFIG --repeat N`; "$@" goes to the environment\'s python.',
        "set -e",
        *(MODULES_INIT if environment.modules else ()),
        *template_lines(template, environment),
        *environment.setup,
        environment.python_command(),
    ]
    return "\n".join(lines) + "\n"


def write_launchers(sweep_dir: Path, cluster: Mapping[str, Any], names: Iterable[str]) -> list[Path]:
    """Write the launcher of each of these environments into SWEEP_DIR/environments/."""
    defined, paths = environments_of(cluster), []
    for name in sorted(set(names)):
        path = environment_launcher(sweep_dir, name)
        with atomic_output(path) as fh:  # whole: a task of the sweep may start it at any moment
            fh.write(launcher_text(cluster, name, defined[name]).encode())
        paths.append(path)
    return paths
