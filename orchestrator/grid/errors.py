"""One line of text for an error that reaches the user (`error: ...`, exit code 2).

Hydra, OmegaConf and sbatch (through submitit) explain themselves over several lines: the
options of a group, the config search path, `full_key:` trailers, a whole command's output. The
user gets one line that keeps what names the problem.
"""

from __future__ import annotations

import re

from hydra.errors import OverrideParseException
from omegaconf.errors import OmegaConfBaseException

_OMEGACONF_TRAILER = re.compile(r"^(full_key|object_type|reference_type|key|value)[:=]")
#: A Slurm client's own error line, e.g. `sbatch: error: Invalid partition name specified`.
_SLURM_ERROR = re.compile(r"\b\w+: error: ")


def one_line(exc: BaseException) -> str:
    """The error as one line: a Slurm client's `error:` line where there is one (sbatch's refusal
    inside submitit's message), else Hydra's or OmegaConf's message with its options inline and
    without the search path and trailers."""
    text = str(exc)
    if isinstance(exc, OverrideParseException):
        text = f"cannot parse override '{exc.override}': {exc.message}"
    elif isinstance(exc, OmegaConfBaseException) and getattr(exc, "full_key", None):
        text = f"{text.splitlines()[0]} (at {exc.full_key})"
    text = text.split("Config search path:")[0]  # the search path only repeats conf/
    # OmegaConf appends `full_key: ...`, `object_type=...` lines that repeat what the first says.
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not _OMEGACONF_TRAILER.match(line.strip())
    ]
    if not lines:
        return type(exc).__name__
    slurm = next((line for line in lines if _SLURM_ERROR.search(line)), None)
    if slurm is not None:
        return slurm
    head, rest = lines[0], lines[1:]
    for i, line in enumerate(rest):
        if line.startswith("Available options in"):
            options = ", ".join(rest[i + 1 :])
            return f"{head} ({line.rstrip(':').lower()}: {options})"
    return " ".join([head, *rest])
