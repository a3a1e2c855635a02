# Issue 13, item 5 on one H100: the seed's practice advice, measured. Regional against whole-model
# compile for resnet50 (compile cold and warm, step time), and the compiled optimizer against the
# eager (fused) optimizer for GPT-2 124M and resnet50 (step time, loss agreement with eager).
# One part per device call (gpt, resnet50): each sweep has its own timeout, a part's add up to less
# than a call's 600 s, and the table is printed as soon as the part's sweeps end. Run from the
# checkout with hydra/omegaconf/submitit on PYTHONPATH (docs/gpu-results.md); OUT: where the packed
# sweeps go.
#   bash examples/benchmarks/compile_practice.sh gpt        # then, in another call: ... resnet50
set -u
export PYTHONPATH=/tmp/site:.
common="device=cuda steps=10 measure.min_seconds=2"
sweep() {  # seconds, then the sweep's overrides
    local limit=$1 began=$SECONDS
    shift
    timeout "$limit" python -m orchestrator.cli.main sweep $common "$@" 2>&1 | grep -E "completed,|error"
    echo "== $* : $(( SECONDS - began )) s"
}
table() {  # sweep directory
    python - "$1" <<'PY'
import sys, analysis
cells, _ = analysis.sweep_frames(sys.argv[1], warn=None)
cols = ["arch", "backend", "regional", "compile_optimizer", "status", "median_step_ms", "speedup", "speedup_low",
        "speedup_high", "compile_time_s", "compile_warm_s", "accuracy", "accuracy_rel_diff", "peak_mem_ratio",
        "graph_count", "recompile_count"]
print(cells[cols].to_string(index=False), flush=True)
PY
}
case ${1:?usage: compile_practice.sh gpt|resnet50} in
gpt)  # 164 s on the H100
    sweep 100 model=gpt size=medium backend=eager,inductor hydra.sweep.dir=/tmp/optimizer
    sweep 80 model=gpt size=medium backend=inductor backend.compile_optimizer=true hydra.sweep.dir=/tmp/optimizer
    table /tmp/optimizer ;;
resnet50)  # regional compile of ResNet blocks recompiles per stage shape: it takes minutes cold
    sweep 140 model=resnet size=large backend=eager,inductor compile.measure=cold_warm hydra.sweep.dir=/tmp/optimizer
    sweep 300 model=resnet size=large backend=inductor backend.regional=true compile.measure=cold_warm \
        hydra.sweep.dir=/tmp/optimizer
    sweep 110 model=resnet size=large backend=inductor backend.compile_optimizer=true hydra.sweep.dir=/tmp/optimizer
    table /tmp/optimizer ;;
esac
tar czf "$OUT/compile_practice_$1.tar.gz" --exclude=compile_cache -C /tmp optimizer 2>/dev/null
