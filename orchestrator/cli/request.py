"""What `compilebench sweep` is asked, as one `SweepRequest`: built by keyword from the parsed
arguments (orchestrator/cli/args.py), its flags checked together as it is built, so that `cmd_sweep`
(orchestrator/cli/main.py) receives only a request it can run. A combination that does not go
together is a `UsageError`: one line, exit 2, before anything is expanded, written or submitted.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.executors.base import Follow


class UsageError(ValueError):
    """Flags that do not go together: one line for the user (exit 2), nothing run."""


@dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """What `compilebench sweep` is asked: its overrides and flags, checked together when built."""

    overrides: tuple[str, ...] = ()
    dry_run: bool = False
    smoke: bool = False
    wait: bool = False
    poll_s: float | None = None
    """--poll: seconds between looks while waiting; None for Follow's default."""
    give_up_s: float | None = None
    """--give-up: seconds of a queue that does not answer before the waiting ends; None: the default."""
    cfg: str | None = None
    """--cfg job: print the cells' configs and run nothing."""
    first: int | None = None
    """--first N: with --cfg job, only the first N cells' configs."""
    config_dirs: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        if self.dry_run and self.wait:
            raise UsageError("--wait and --dry-run exclude each other: a dry run submits nothing to wait for")
        if self.smoke and self.wait:
            raise UsageError("--smoke runs here and submits nothing to wait for")
        if self.cfg and (self.dry_run or self.wait or self.smoke):
            raise UsageError(
                "--cfg job prints the cells' configs and runs nothing: "
                "leave out --dry-run, --wait and --smoke"
            )
        if self.poll_s is not None and not self.wait:
            raise UsageError(
                "--poll SECONDS goes with --wait: how often to look at the queue while following the jobs"
            )
        if self.give_up_s is not None and not self.wait:
            raise UsageError(
                "--give-up SECONDS goes with --wait: how long to wait for a queue that does not answer"
            )
        if self.first is not None and (not self.cfg or self.first < 1):
            raise UsageError("--first N (N >= 1) goes with --cfg job: how many cells' configs to print")

    @classmethod
    def from_args(cls, args: argparse.Namespace, extra: Sequence[str] = ()) -> SweepRequest:
        """The request of parsed `sweep` arguments (`extra`: overrides argparse left over); raises
        UsageError."""
        return cls(
            overrides=(*args.overrides, *extra),
            dry_run=args.dry_run,
            smoke=args.smoke,
            wait=args.wait,
            poll_s=args.poll,
            give_up_s=args.give_up,
            cfg=args.cfg,
            first=args.first,
            config_dirs=tuple(args.config_dir or ()),
        )

    @property
    def follow(self) -> Follow | None:
        """--wait's settings, None without --wait."""
        if not self.wait:
            return None
        given = {"poll_s": self.poll_s, "give_up_s": self.give_up_s}
        return Follow(**{key: value for key, value in given.items() if value is not None})
