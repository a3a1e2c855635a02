#!/bin/bash
# compilebench environment torch215 of cluster grete: each cell of environment=torch215
# runs `bash THIS -m workloads.run CONFIG --repeat N`; "$@" goes to the environment's python.
set -e
conda activate torch215
export PYTHONNOUSERSITE=1
exec python "$@"
