#!/bin/bash
# compilebench environment ngc of cluster grete: each cell of environment=ngc
# runs `bash THIS -m workloads.run CONFIG --repeat N`; "$@" goes to the environment's python.
set -e
export APPTAINER_BIND=/scratch
exec apptainer exec --nv '/images/pytorch 25.09.sif' python "$@"
