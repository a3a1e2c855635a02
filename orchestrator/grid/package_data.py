"""Where the files compilebench ships beside its code lie, and its version.

The Hydra config groups (`conf/`) and the sbatch site templates (`sbatch_templates/`) are top-level
directories of the source checkout, which an editable install uses as they are; a wheel (and so
`pip install .`) carries them inside the `orchestrator` package as `orchestrator/conf/` and
`orchestrator/sbatch_templates/` (pyproject.toml maps them there). This module is the one place
that knows both layouts; everything else asks it.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as distribution_version
from pathlib import Path

DISTRIBUTION = "compilebench"
_PACKAGE = Path(__file__).resolve().parents[1]  # the `orchestrator` package, above this room


def _shipped(name: str) -> Path:
    """The directory `name` inside the installed package, else the checkout's top-level one."""
    installed = _PACKAGE / name
    return installed if installed.is_dir() else _PACKAGE.parent / name


#: The Hydra config groups (config.yaml, cluster_base.yaml, one directory per group).
CONF_DIR = _shipped("conf")
#: The site preamble templates of the sbatch scripts (`<name>.sh.tmpl`).
TEMPLATES_DIR = _shipped("sbatch_templates")


def version() -> str:
    """The installed distribution's version (package metadata), or a note that there is none."""
    try:
        return distribution_version(DISTRIBUTION)
    except PackageNotFoundError:  # a checkout on PYTHONPATH that was never installed
        return "unknown (not installed)"
