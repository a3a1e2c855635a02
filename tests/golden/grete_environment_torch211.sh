#!/bin/bash
# compilebench environment torch211 of cluster grete: each cell of environment=torch211
# runs `bash THIS -m workloads.run CONFIG --repeat N`; "$@" goes to the environment's python.
set -e
if ! type module >/dev/null 2>&1; then  # no login shell passed `module` on: its bash init
  modules_init="${MODULESHOME:-/usr/share/modules}/init/bash"
  [[ -f $modules_init ]] || { echo "module: not defined, nor $modules_init" >&2; exit 1; }
  source "$modules_init"
fi
module load cuda/12.4
module load python/3.11
source '/user/me/venvs/torch 2.11'/bin/activate
exec python "$@"
