# Issue 12, item 3: `+suite=timm_train` (44 timm models x eager, inductor; bf16 autocast, synthetic
# data, batch 128) through the real single-node Slurm on this machine's GPUs (nvidia-h200-x2: the
# array keeps both busy), with the compile cache shared by the sweep's jobs.
# A device call lasts at most 600 s, less than the suite needs. So the first call submits the sweep
# and follows it for FOLLOW seconds; Slurm is then stopped (the jobs still running are killed, and
# their cells are left without a result) and SWEEP_DIR is packed into OUT/suite.tar.gz. A later
# call unpacks that pack (PACK) and runs `compilebench status SWEEP_DIR --retry-failed` on a fresh
# Slurm: the cells that did not complete are submitted again, the completed ones kept.
#   bash examples/benchmarks/suite_gpu.sh "" [FOLLOW] [NAME]     # first call (NAME: the sweep's, default suite)
#   bash examples/benchmarks/suite_gpu.sh PACK [FOLLOW] [NAME]   # the calls after it (PACK: OUT/NAME.tar.gz)
set -eu
export PYTHONPATH=/tmp/site:.
pack=${1:-}
follow=${2:-450}
name=${3:-suite}
mkdir -p /tmp/sweeps
if [ -n "$pack" ]; then
    # A clean copy of the pack, as on a fresh machine: on one still warm from the last call, the
    # compile cache left behind would make a retried cell's compile a warm one.
    rm -rf "/tmp/sweeps/$name"
    tar xzf "$pack" -C /tmp/sweeps
    how=(--retry-failed)
else
    how=(-- +suite=timm_train measure.min_seconds=2 cluster.compile_cache=shared +cluster.partitions.H200=grete-h100)
fi
python examples/benchmarks/slurm_gpu_sweep.py --prefix .carry/slurm --sweep-dir "/tmp/sweeps/$name" --timeout "$follow" \
    --cpus-per-gpu 16 --out "$OUT" "${how[@]}" || true
python -m orchestrator.cli.main analyze "/tmp/sweeps/$name" --no-plots | sed -n '/[Ss]uite/,$p' | head -60
