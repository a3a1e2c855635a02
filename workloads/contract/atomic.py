"""Files written whole: through a temporary file in the same directory and one `os.replace`, so a
reader sees the old file or the new one, never half of one (Parquet results, the compile cache's
key.json, the local executor's turn files). Standard library only: the login node imports it."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file whose content replaces `path` in one rename when the block ends without
    error; it is a temporary file in the same directory until then, and removed on error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
