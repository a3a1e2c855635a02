#!/bin/bash

# Parameters
#SBATCH --array=0-1%2
#SBATCH --cpus-per-task=16
#SBATCH --error=SWEEP_DIR/submitit/%A_%a_0_log.err
#SBATCH --gres=gpu:A100:1
#SBATCH --job-name=compilebench-sweep
#SBATCH --mem=120GB
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=SWEEP_DIR/submitit/%A_%a_0_log.out
#SBATCH --partition=grete:shared
#SBATCH --signal=USR2@90
#SBATCH --time=180
#SBATCH --wckey=submitit

# setup
export COMPILEBENCH_COMPILE_CACHE="$(mktemp -d "${TMPDIR:-/tmp}/compilebench-compile-cache.XXXXXX")"
trap 'rm -rf "$COMPILEBENCH_COMPILE_CACHE"' EXIT

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output SWEEP_DIR/submitit/%A_%a_%t_log.out --error SWEEP_DIR/submitit/%A_%a_%t_log.err --cpus-per-task=16 PYTHON -u -m submitit.core._submit SWEEP_DIR/submitit
