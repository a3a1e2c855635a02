# Issue 13 item 5 on one GPU: regional compilation of resnet50 and the compiled optimizer step
# (GPT-2 124M, resnet50) against whole-model compile and eager, in one sweep directory per model.
# Run from the checkout with hydra/omegaconf/submitit on PYTHONPATH (docs/gpu-results.md); OUT: where the packed sweeps go.
set -u
common="device=cuda steps=5 measure.min_seconds=2"
sweep() { timeout "$1" python -m orchestrator.cli sweep "${@:2}" $common 2>&1 | grep -E "^\[|completed,|^error"; }
s=$(date +%s)
sweep 200 model=resnet size=large backend=eager,inductor compile.measure=cold_warm hydra.sweep.dir=/tmp/options/resnet50
sweep 120 model=resnet size=large backend=inductor backend.regional=true compile.measure=cold_warm hydra.sweep.dir=/tmp/options/resnet50
sweep 120 model=resnet size=large backend=inductor backend.compile_optimizer=true hydra.sweep.dir=/tmp/options/resnet50
sweep 150 model=gpt size=medium backend=eager,inductor hydra.sweep.dir=/tmp/options/gpt2
sweep 120 model=gpt size=medium backend=inductor backend.compile_optimizer=true hydra.sweep.dir=/tmp/options/gpt2
echo "== $(( $(date +%s) - s )) s"
for d in resnet50 gpt2; do python -m orchestrator.cli analyze /tmp/options/$d --no-plots 2>/dev/null | sed -n '/### Cells/,/^Measured/p' | cut -d'|' -f2,6,7,15,21,22,25,26,30,33,34; done
tar czf "$OUT/compile_options.tar.gz" --exclude=compile_cache -C /tmp options
