# Issue 13 on one GPU: cold vs warm compiles (compile.measure=cold_warm), then regional vs whole-model compile.
# Run from the checkout with hydra/omegaconf/submitit on PYTHONPATH (docs/gpu-results.md); OUT: where the packed sweeps go.
set -u
export PYTHONPATH=/tmp/site:.
common="device=cuda steps=5 measure.min_seconds=2 compile.measure=cold_warm"
s=$(date +%s)
timeout 240 python -m orchestrator.cli.main sweep model=gpt size=small,medium backend=eager,inductor $common hydra.sweep.dir=/tmp/coldwarm 2>&1 | grep -E "^\[|completed,"
timeout 150 python -m orchestrator.cli.main sweep model=resnet size=small backend=eager,inductor $common hydra.sweep.dir=/tmp/coldwarm 2>&1 | grep -E "^\[|completed,"
echo "== cold/warm sweeps $(( $(date +%s) - s )) s"
s=$(date +%s)
timeout 170 python -m orchestrator.cli.main sweep model=gpt size=medium backend=inductor backend.regional=true $common hydra.sweep.dir=/tmp/regional 2>&1 | grep -E "^\[|completed,|error"
echo "== regional sweep $(( $(date +%s) - s )) s"
python - <<'PY'
import glob, pandas as pd
r = pd.concat(pd.read_parquet(p) for p in glob.glob('/tmp/coldwarm/cells/*/run.parquet') + glob.glob('/tmp/regional/cells/*/run.parquet'))
cols = ['model','arch','size','backend','regional','status','median_step_ms','compile_time_s','compile_cold_s','compile_warm_s','fx_graph_cache_hits','fx_graph_cache_misses','aot_autograd_cache_hits','compile_cache_warm']
print(r[[c for c in cols if c in r]].to_string())
PY
tar czf "$OUT/coldwarm.tar.gz" --exclude=compile_cache -C /tmp coldwarm regional 2>/dev/null
