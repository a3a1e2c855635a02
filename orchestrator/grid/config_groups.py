"""The config search path of a sweep: the shipped `conf/` and a site's own directories
(`sweep --config-dir DIR`), the groups and values found there, and the Hydra overrides that
compilebench refuses because it does their job itself.

A site keeps its profiles outside the installed package: `DIR/cluster/<site>.yaml` (and
`DIR/experiment/<name>.yaml`, ...) become values of the groups beside the shipped ones. As with
Hydra's own `--config-dir`, DIR is searched after `conf/`; a file that a shipped one would hide is
refused instead of being silently ignored. Listing reads the directories themselves (no Hydra), so
`compilebench sweep --help` stays fast.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from orchestrator.grid.package_data import CONF_DIR

#: The file of the root config in CONF_DIR (Hydra's config name + .yaml).
ROOT_FILE = "config.yaml"


class ConfigDirError(ValueError):
    """A --config-dir that cannot be used; the message is one line for the user."""


def group_values(dirs: Sequence[Path]) -> dict[str, list[str]]:
    """{group: sorted values} of every config group in these directories (first one first)."""
    groups: dict[str, set[str]] = {}
    for directory in dirs:
        for path in Path(directory).glob("*/*.yaml"):
            groups.setdefault(path.parent.name, set()).add(path.stem)
    return {group: sorted(values) for group, values in sorted(groups.items())}


def default_choices(conf_dir: Path = CONF_DIR) -> dict[str, str]:
    """{group: value} that the root config's defaults list selects (`- cluster: local`)."""
    defaults = (yaml.safe_load((conf_dir / ROOT_FILE).read_text()) or {}).get("defaults", [])
    return {k: str(v) for entry in defaults if isinstance(entry, dict) for k, v in entry.items()}


def search_dirs(config_dirs: Sequence[Path | str] = (), conf_dir: Path = CONF_DIR) -> list[Path]:
    """`conf_dir`, then each --config-dir (absolute); ConfigDirError for a directory that does not
    exist or holds a group value that a shipped one of the same name would hide."""
    extra = [Path(d).expanduser().resolve() for d in config_dirs]
    shipped = {(group, value) for group, values in group_values([conf_dir]).items() for value in values}
    for directory in extra:
        if not directory.is_dir():
            raise ConfigDirError(f"--config-dir {directory}: not a directory")
        for group, values in group_values([directory]).items():
            for value in values:
                if (group, value) in shipped:
                    raise ConfigDirError(
                        f"--config-dir {directory}: {group}/{value}.yaml has the name of a shipped "
                        f"config, which Hydra would take instead; give it another name"
                    )
    return [conf_dir, *extra]


def search_path_override(dirs: Sequence[Path], overrides: Sequence[str]) -> list[str]:
    """`hydra.searchpath=[file://DIR,...]` for the --config-dir directories (Hydra's public way to
    add to the search path; Hydra reads the first such override), merged with the user's own."""
    if not dirs:
        return []
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    theirs = [o for o in overrides if o.split("=", 1)[0].lstrip("+") == "hydra.searchpath"]
    paths = [f"file://{d}" for d in dirs]
    for override in theirs:
        value = parser.parse_override(override).value()
        paths += [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return [f"hydra.searchpath=[{','.join(repr(p) for p in paths)}]"]


def refused(overrides: Sequence[str], clusters: Sequence[str]) -> str | None:
    """One line for an override that picks Hydra's launcher or sweeper (or sets their keys):
    compilebench launches (cluster=...) and expands (its own sweep) by itself. None if none does."""
    where = f"cluster=NAME ({', '.join(clusters)}; its keys as cluster.KEY=VALUE)"
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "hydra/launcher" or key.startswith("hydra.launcher."):
            return f"{override}: compilebench launches the cells itself; choose where with {where}"
        if key == "hydra/sweeper":
            return (
                f"{override}: compilebench expands the grid itself (sweep with a,b range() choice() glob() "
                f"or an experiment's hydra.sweeper.params); choose where it runs with {where}"
            )
    return None


def groups_help(config_dirs: Sequence[Path | str] = ()) -> str:
    """The config groups and their values, for `compilebench sweep --help`."""
    try:
        dirs = search_dirs(config_dirs)
    except ConfigDirError as exc:
        return f"config groups: {exc}"
    defaults = default_choices()
    groups = group_values(dirs)
    names = {g: (g if g in defaults else f"+{g}") for g in groups}
    width = max(map(len, names.values()), default=0)
    lines = [
        f"config groups (GROUP=VALUE, GROUP=A,B to sweep; * the default), from {', '.join(map(str, dirs))}:"
    ]
    for group, values in sorted(groups.items(), key=lambda item: (item[0] not in defaults, item[0])):
        shown = [f"{v}*" if defaults.get(group) == v else v for v in values]
        lines.append(f"  {names[group]:<{width}}  {', '.join(shown)}")
    return "\n".join(lines)
