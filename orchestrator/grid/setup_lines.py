"""The site template's setup lines: `sbatch_templates/<name>.sh.tmpl` filled from a profile's fields.

A job script's `# setup` section begins with them (orchestrator/executors/slurm/sbatch.py), filled
from the profile's own `modules`, `venv`, `conda_env` and `env`; a named environment's launcher
(orchestrator/grid/environments.py) begins with the same template filled from the environment's.
sbatch_templates/README.md says how a template is written: `{field}` placeholders, every value
shell-quoted, a list repeating its line, a mapping per entry (`{env.name}`, `{env.value}`).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.grid.package_data import TEMPLATES_DIR
from orchestrator.grid.profile import ProfileError

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
