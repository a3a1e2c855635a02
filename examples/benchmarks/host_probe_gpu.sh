# Issue 50, item 1 on a GPU: does the host probe tell a host change from a code change? One sweep of
# 20 eager cells (gpt and resnet, tiny and small, batch 8-128, bf16: launch-bound to GPU-bound) per
# call; run it on two machines (a give_back between the calls), then compare the packs here:
#   OUT=/tmp/out LABEL=A bash examples/benchmarks/host_probe_gpu.sh          # on machine A
#   OUT=/tmp/out LABEL=B bash examples/benchmarks/host_probe_gpu.sh          # on machine B
#   compilebench compare A/aa B/aa                                           # here, both unpacked
# With HOG=1 the sweep runs again with a busy process pinned to the cell's core (a host slower by a
# known cause, the same code). The probe's own noise on the machine first (host_probe_noise.py).
set -eu
label=${LABEL:-A}
grid=${GRID:-"model=gpt,resnet size=tiny,small backend=eager precision=bf16 batch_size=8,16,32,64,128"}
measure=${MEASURE:-"repeats=3 measure.min_seconds=0.5"}
# A sweep left unfinished by the limit resumes where it stopped when run again on the same dir.
limit=${SWEEP_LIMIT_S:-520}
root=/tmp/host_probe_gpu/$label
mkdir -p "$root"
[ "${NOISE:-1}" = 0 ] || python examples/benchmarks/host_probe_noise.py 8 cuda > "$OUT/${label}_probe_noise.txt" 2>&1 || true
# shellcheck disable=SC2086 # the grid is words
timeout "$limit" python -m orchestrator.cli.main sweep $grid $measure hydra.sweep.dir="$root/aa" \
    >> "$OUT/${label}_aa.txt" 2>&1 || echo "aa sweep: exit $?" >> "$OUT/${label}_aa.txt"
if [ "${HOG:-0}" = 1 ]; then
    taskset -c 0 sh -c 'while :; do :; done' &
    hog=$!
    # shellcheck disable=SC2086
    timeout "${HOG_LIMIT_S:-$limit}" taskset -c 0 python -m orchestrator.cli.main sweep ${HOG_GRID:-$grid} $measure \
        hydra.sweep.dir="$root/hog" >> "$OUT/${label}_hog.txt" 2>&1 || echo "hog sweep: exit $?" >> "$OUT/${label}_hog.txt"
    kill "$hog"
fi
tar czf "$OUT/host_probe_$label.tar.gz" --exclude=compile_cache -C /tmp/host_probe_gpu "$label"
tail -n 40 "$OUT/${label}_aa.txt"
