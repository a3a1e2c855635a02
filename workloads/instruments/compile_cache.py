"""Where a cell's torch.compile caches lie: one directory per machine kind under a base directory.

The executor names a base directory in COMPILEBENCH_COMPILE_CACHE (`cluster.compile_cache`:
`shared` = SWEEP_DIR/compile_cache for the whole sweep, `per_job` = a fresh directory per job or
process); the workload, on its node, points inductor and triton into a subdirectory of it named by
a digest of what a cache entry is only valid for and what inductor's own keys may not cover:

    BASE/<key>/inductor   TORCHINDUCTOR_CACHE_DIR: FX graph cache (fxgraph/), AOTAutograd cache
                          (aotautograd/), generated code and C++ builds, inductor's local autotune
                          results, dynamo's automatic-dynamic profiles
    BASE/<key>/triton     TRITON_CACHE_DIR: compiled Triton kernels (cubins)
    BASE/<key>/key.json   the key's inputs, for whoever wonders what the digest means

The key is the Python, torch, triton and CUDA versions and the device (the GPU's name, or the CPU's
model on the CPU). The GPU is only known on the node, so the key is computed here, in the job, not
in the sbatch script. Model, backend and inductor config are not in it: inductor's own cache keys
(graph, inductor config, shapes, torch version) keep different cells' entries apart, so that
cells of one sweep share what they can.

Several array tasks may write one directory at once: inductor writes each cache file to a
temporary name and renames it into place, triton writes into a temporary directory and
`os.replace`s, and key.json is written the same way (workloads/schema.atomic_output); a reader sees
a whole entry or none. Without COMPILEBENCH_COMPILE_CACHE (a cell run by hand) torch's own
defaults stay (`/tmp/torchinductor_$USER`, `~/.triton/cache`), as recorded.

This module imports no torch: the orchestrator names the variable in sbatch scripts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from workloads.contract.atomic import atomic_output

#: The base directory the executor gives the workload (the sbatch script exports it).
BASE_ENV = "COMPILEBENCH_COMPILE_CACHE"
INDUCTOR_ENV, TRITON_ENV = "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"
KEY_FILE = "key.json"


def key_inputs(environment: Mapping[str, Any], cpu_model: str | None) -> dict[str, str | None]:
    """What a cache directory is keyed by, from the run row's environment columns
    (workloads/environment.describe_environment) and the host's CPU model."""
    return {
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "torch": environment.get("torch_version"),
        "triton": environment.get("triton_version"),
        "cuda": environment.get("cuda_version"),
        "device": environment.get("gpu_name") or f"cpu: {cpu_model}",
    }


def cache_key(inputs: Mapping[str, Any]) -> str:
    """The directory name of these key inputs: 16 hex digits of their digest."""
    return hashlib.sha256(json.dumps(dict(inputs), sort_keys=True).encode()).hexdigest()[:16]


def use(inputs: Mapping[str, Any]) -> None:
    """Point this process's (and its children's) inductor and triton caches into the keyed
    directory under COMPILEBENCH_COMPILE_CACHE, before anything compiles (where the executor gave
    no base, the caches stay torch's own; dynamo_records.cache_state tells which one is used)."""
    base = os.environ.get(BASE_ENV)
    if base:
        keyed = Path(base) / cache_key(inputs)
        keyed.mkdir(parents=True, exist_ok=True)
        if not (keyed / KEY_FILE).exists():
            with atomic_output(keyed / KEY_FILE) as fh:
                fh.write(json.dumps(dict(inputs), indent=1, sort_keys=True).encode())
        os.environ[INDUCTOR_ENV], os.environ[TRITON_ENV] = str(keyed / "inductor"), str(keyed / "triton")


@contextlib.contextmanager
def private_base() -> Iterator[Path]:
    """A fresh, empty base directory as COMPILEBENCH_COMPILE_CACHE for this process and the
    processes it starts (the cold and the warm compile of `compile.measure=cold_warm`); removed
    afterwards, and the cache variables restored."""
    saved = {name: os.environ.get(name) for name in (BASE_ENV, INDUCTOR_ENV, TRITON_ENV)}
    with tempfile.TemporaryDirectory(prefix="compilebench-cold-warm-") as base:
        os.environ[BASE_ENV] = base
        try:
            yield Path(base)
        finally:
            os.environ.update({name: value for name, value in saved.items() if value is not None})
            for name in [name for name, value in saved.items() if value is None]:
                os.environ.pop(name, None)
