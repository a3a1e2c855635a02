# Issue 41, item 5: one sweep over two real torch releases, each in a venv of its own, and the version
# table `analyze` makes of it (docs/versions.md). Run from the checkout with the project's venv active:
#   OUT=/tmp/out bash examples/benchmarks/torch_versions.sh torch2130=/path/venv213 torch2141=/path/venv2141
# Each argument is NAME=VENV, oldest first: the version table compares neighbours in this order. The
# venvs need what `workloads` imports (docs/clusters.md "Software environments"). OUT: where the packed
# sweep and the analysis go. GRID (optional): the sweep's other overrides.
set -eu
grid=${GRID:-"model=gpt size=tiny,small backend=eager,inductor device=cpu repeats=2"}
sweep=/tmp/torch_versions
defined=() names=()
for pair in "$@"; do
    defined+=("+cluster.environments.${pair%%=*}.venv=${pair#*=}")
    names+=("${pair%%=*}")
done
rm -rf "$sweep"
# shellcheck disable=SC2086 # the grid is words
python -m orchestrator.cli.main sweep $grid "${defined[@]}" "environment=$(IFS=,; echo "${names[*]}")" \
    hydra.sweep.dir="$sweep"
python -m orchestrator.cli.main analyze "$sweep" --full > "$OUT/analysis.md"
cat "$OUT/analysis.md"
tar czf "$OUT/torch_versions.tar.gz" --exclude=compile_cache -C /tmp torch_versions
