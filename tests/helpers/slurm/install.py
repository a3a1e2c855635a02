"""Where a local Slurm's programs are: the system's Debian packages, or an unpacked-.deb prefix.

The tests' machines install the packages with `tests/helpers/slurm/install.sh`. A GPU machine without a
package registry gets the same Debian packages unpacked into a directory that travels with the
working tree (`tests/helpers/slurm/unpack_debs.sh PREFIX`, run where apt works); there the daemons carry a
`-wlm` suffix (Debian installs the plain names through update-alternatives, which `dpkg -x`
skips), the libraries and plugins live under the prefix, and slurmd starts job steps through
the path it was built with, /usr/sbin/slurmstepd.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

#: Commands that must be found, without and with accounting.
REQUIRED = (
    "munged",
    "munge",
    "unmunge",
    "slurmctld",
    "slurmd",
    "sbatch",
    "squeue",
    "sinfo",
    "scontrol",
    "srun",
    "sacct",
    "scancel",
)
REQUIRED_ACCOUNTING = ("slurmdbd", "sacctmgr", "mysqld_safe", "mariadb-install-db", "mariadb")

#: slurmd runs job steps through this compiled-in path.
SLURMSTEPD = Path("/usr/sbin/slurmstepd")
LIB_DIR = "usr/lib/x86_64-linux-gnu"


@dataclass(frozen=True)
class SlurmInstall:
    """The programs of one Slurm installation; `prefix` None means the system's (PATH)."""

    prefix: Path | None = None

    def command(self, name: str) -> str | None:
        """Full path of a program, or None when this installation lacks it."""
        if self.prefix is None:
            return shutil.which(name)
        for directory in ("usr/sbin", "usr/bin"):
            for candidate in (name, f"{name}-wlm"):
                path = self.prefix / directory / candidate
                if path.is_file() and os.access(path, os.X_OK):
                    return str(path)
        return None

    def missing(self, accounting: bool) -> list[str]:
        """The programs a cluster of this kind needs and this installation lacks."""
        names = REQUIRED + (REQUIRED_ACCOUNTING if accounting else ())
        return [name for name in names if self.command(name) is None]

    @property
    def plugin_dir(self) -> Path | None:
        """PluginDir for slurm.conf (None: the packages' compiled-in default)."""
        return None if self.prefix is None else self.prefix / LIB_DIR / "slurm-wlm"

    def env(self) -> dict[str, str]:
        """PATH and LD_LIBRARY_PATH for the prefix's programs (inherited by jobs through sbatch)."""
        if self.prefix is None:
            return {}
        libs = [str(self.prefix / LIB_DIR / "slurm-wlm"), str(self.prefix / LIB_DIR)]
        paths = [str(self.prefix / "usr/bin"), str(self.prefix / "usr/sbin")]
        return {
            "PATH": os.pathsep.join([*paths, os.environ.get("PATH", "")]),
            "LD_LIBRARY_PATH": os.pathsep.join([*libs, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]),
        }

    def link_slurmstepd(self) -> None:
        """Point /usr/sbin/slurmstepd at the prefix's (slurmd finds it nowhere else); needs root.
        An installed one (same packages) is left as it is."""
        if self.prefix is None or SLURMSTEPD.exists():
            return
        target = self.command("slurmstepd")
        if target is None:
            raise FileNotFoundError(f"no slurmstepd under {self.prefix}")
        SLURMSTEPD.unlink(missing_ok=True)  # a dangling link from an earlier prefix
        SLURMSTEPD.symlink_to(target)
