#!/bin/bash

# Parameters
#SBATCH --account='proj; touch pwned'
#SBATCH --constraint=80gb
#SBATCH --cpus-per-task=16
#SBATCH --error=SWEEP_DIR/submitit/%j_0_log.err
#SBATCH --gres=gpu:A100:1
#SBATCH --job-name=compilebench-sweep
#SBATCH --mail-type=FAIL
#SBATCH --mem=120GB
#SBATCH --nodes=1
#SBATCH --open-mode=append
#SBATCH --output=SWEEP_DIR/submitit/%j_0_log.out
#SBATCH --partition=grete:shared
#SBATCH --qos=normal
#SBATCH --signal=USR2@90
#SBATCH --time=60
#SBATCH --wckey=submitit

# setup
module load cuda/12.1
module load 'gcc 12'
source '/opt/venv with space'/bin/activate
export NCCL_DEBUG=WARN
export WHO='$(whoami)'
module purge
nvidia-smi -L
export COMPILEBENCH_COMPILE_CACHE=SWEEP_DIR/compile_cache

# command
export SUBMITIT_EXECUTOR=slurm
srun --unbuffered --output SWEEP_DIR/submitit/%j_%t_log.out --error SWEEP_DIR/submitit/%j_%t_log.err --cpus-per-task=16 PYTHON -u -m submitit.core._submit SWEEP_DIR/submitit
