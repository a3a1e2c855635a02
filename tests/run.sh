#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what the tests need, then runs pytest.
# Extra arguments go to pytest (e.g. `bash tests/run.sh -k workloads -x`).
set -euo pipefail
cd "$(dirname "$0")/.."

# torch, torchvision and timm from the package registry together: timm needs a torchvision
# built against the same torch (the registry's build is the CUDA one; it runs on CPU-only hosts).
python3 -m pip install --quiet --disable-pip-version-check torch torchvision timm
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then bash tests/helpers/slurm/install.sh || echo "run.sh: tests/helpers/slurm/install.sh failed: the local Slurm tests skip (error under COMPILEBENCH_REQUIRE_SLURM)" >&2; fi
# A real headless browser opens the report page (tests/system/test_report_page.py).
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null && ! command -v chromium >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null || echo "run.sh: installing chromium failed: the report page tests skip (error under COMPILEBENCH_REQUIRE_BROWSER)" >&2
fi
# Environment Modules for the modules kind of a named environment (tests/system/test_environment_modules.py).
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null && [[ ! -f /usr/share/modules/init/bash ]]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq environment-modules >/dev/null || echo "run.sh: installing environment-modules failed: the modules environment tests skip (error under COMPILEBENCH_REQUIRE_MODULES)" >&2
fi

# What pip resolved: the versions a test run used (docs/testing.md lists those of the fresh runs).
python3 -c 'from importlib.metadata import version as v; print("run.sh: python " + __import__("sys").version.split()[0], *(f"{n} {v(n)}" for n in ("torch", "timm", "hydra-core", "omegaconf", "submitit", "pandas", "numpy", "pyarrow", "matplotlib", "scipy", "pytest", "setuptools")), sep=", ")'
# Two workers (pytest-xdist), each test module on one of them (`--dist loadfile`: a module's shared
# sweep or cell is made once), in the order collected (`--no-loadscope-reorder`, xdist 3.8: it would
# put the modules of many tests first, and the system room's few long ones, Slurm's faults among
# them, last). A worker starts its own local Slurm where its modules need one: the clusters pick
# free ports and job ids and never meet (tests/helpers/slurm/cluster.py).
# COMPILEBENCH_TEST_WORKERS=0 runs everything in this process (as does a later `-n 0`).
python3 -m pytest -n "${COMPILEBENCH_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "$@"
