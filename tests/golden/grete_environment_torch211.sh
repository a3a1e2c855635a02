#!/bin/bash
# compilebench environment torch211 of cluster grete: each cell of environment=torch211
# runs `bash THIS -m workloads.run CONFIG --repeat N`; "$@" goes to the environment's python.
set -e
module load cuda/12.4
module load python/3.11
source '/user/me/venvs/torch 2.11'/bin/activate
exec python "$@"
