"""`compilebench sweep`'s flags that do not go together are refused as its request is built: one
`error:` line, exit 2, before the overrides are expanded (orchestrator/cli/request.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.request import SweepRequest, UsageError
from orchestrator.executors.base import EXIT_USAGE, Follow


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--dry-run", "--wait"], "--wait and --dry-run exclude each other"),
        (["--smoke", "--wait"], "--smoke runs here and submits nothing to wait for"),
        (["--cfg", "job", "--smoke"], "--cfg job prints the cells' configs and runs nothing"),
        (["--poll", "5"], "--poll SECONDS goes with --wait"),
        (["--give-up", "5"], "--give-up SECONDS goes with --wait"),
        (["--cfg", "job", "--first", "0"], "--first N (N >= 1) goes with --cfg job"),
    ],
)
def test_flags_that_do_not_go_together_exit_2_before_expanding(
    flags: list[str], says: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # An override that expansion would refuse: the flags' error comes first, so nothing is expanded.
    assert main(["sweep", "model=no_such_model", f"hydra.sweep.dir={tmp_path / 'sw'}", *flags]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"error: {says}") and err.count("\n") == 1, err
    assert not (tmp_path / "sw").exists()


def test_a_request_is_checked_however_it_is_built() -> None:
    with pytest.raises(UsageError, match="exclude each other"):
        SweepRequest(overrides=("size=tiny",), dry_run=True, wait=True)
    assert SweepRequest(wait=True, poll_s=5.0).follow == Follow(poll_s=5.0)
    assert SweepRequest(dry_run=True).follow is None
