"""docs/gpu-results.md's derived blocks, re-derived from the committed result packs at HEAD.

    python examples/benchmarks/gpu_results_doc.py            # check: exit 1 with a diff if the doc differs
    python examples/benchmarks/gpu_results_doc.py --write     # rewrite the derived blocks in place
    python examples/benchmarks/gpu_results_doc.py --verdicts  # every sweep's cells: cell_id, label -> verdict

A derived block is whatever lies between a marker and its end; the prose around it stays hand-written:

    <!-- derived: KIND SWEEP [SWEEP ...] [key=value ...] -->
    ...written by this script...
    <!-- /derived -->

SWEEP names a tarball under docs/results/ (`h100_2026-11-25_energy_ba79a79/sw_gpt2b.tar.gz`),
with `:SUBDIR` where the tarball holds several sweeps. Each is unpacked into a temporary directory and
read the way `compilebench analyze SWEEP_DIR` reads it (analysis.report.analyze: the margin its
repeats=auto cells were decided with), so a block shows what the analysis at HEAD makes of the pack.
KIND:
- `provenance`: per sweep, the commit its run rows recorded (`git_sha`, `-dirty` where the tree had
  uncommitted changes), the GPU, torch and the day.
- `table name=NAME [reference=REF] [columns="a;b"] [where=COLUMN]`: the analysis' table NAME
  (report/tables/NAME.md), the rows of every sweep named one after another, the columns given (default:
  all), the rows with COLUMN not empty (default: all).
- `across LABEL@SWEEP ... [unpaired=1] [rows_of=LABEL] [geomean=1]`: each compiled cell's speedup in
  several sweeps of the same cells, a column per LABEL (its sweeps read together), the centres'
  distance where there are two.
- `span`: per sweep, its attempts' first start to last end, and the sum.
- `compare A B`: `compilebench compare A B`'s tables and lines.
- `energy`: per compiled cell with an eager baseline, its and the eager cell's J/step, the speedup, the
  energy ratio, compile kJ, break-even, how repeats=auto stopped, and what its verdict cost.
`--verdicts [SWEEP ...]` (default: every sweep of every pack) prints each cell's verdict, so that two
versions of the analysis can be compared with `diff`.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import shlex
import sys
import tarfile
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))  # run as a script from anywhere, as the other benchmarks

from analysis.compare import compare, to_markdown  # noqa: E402
from analysis.rendering.text import fmt_number, render_markdown  # noqa: E402
from analysis.report import Analysis, analyze  # noqa: E402
from analysis.studies.sweep.table import SUMMARY  # noqa: E402
from examples.benchmarks.device_time_two_machines import host_model, machines  # noqa: E402
from workloads.contract.sweep_dir import CELLS_DIR, MANIFEST_FILE, RUN_FILE  # noqa: E402

DOC = REPO_ROOT / "docs" / "gpu-results.md"
RESULTS = REPO_ROOT / "docs" / "results"
HINT = "run python examples/benchmarks/gpu_results_doc.py --write"
#: A marker on a line of its own, what follows it, its end on a line of its own.
BLOCK = re.compile(
    r"^(<!-- derived: (?P<spec>[^\n]+?) -->\n)(?P<body>.*?)^(<!-- /derived -->)$", re.DOTALL | re.MULTILINE
)
#: How `git describe --dirty` (workloads/instruments/environment.py) marks a tree with uncommitted changes.
DIRTY = "-dirty"
#: The run-row columns a pack's provenance line reads (older rows lack `git_sha`).
PROVENANCE = ["git_sha", "started_at", "gpu_name", "torch_version"]


@dataclass
class Packs:
    """The tarballs unpacked so far (each once), and each sweep's analysis (each once per reference)."""

    root: Path
    _unpacked: dict[str, Path] = field(default_factory=dict)
    _analyses: dict[tuple[str, str | None], Analysis] = field(default_factory=dict)

    def sweep_dir(self, sweep: str) -> Path:
        tarball, _, subdir = sweep.partition(":")
        if tarball not in self._unpacked:
            path = RESULTS / tarball
            if not path.is_file():
                raise SystemExit(f"gpu_results_doc: no pack {path.relative_to(REPO_ROOT)}")
            target = Path(tempfile.mkdtemp(dir=self.root))
            with tarfile.open(path) as archive:
                archive.extractall(target, filter=_files_only)
            self._unpacked[tarball] = target
        found = sweep_dirs(self._unpacked[tarball])
        chosen = [
            d for d in found if not subdir or d.relative_to(self._unpacked[tarball]).as_posix() == subdir
        ]
        if len(chosen) != 1:
            names = ", ".join(d.relative_to(self._unpacked[tarball]).as_posix() for d in found)
            raise SystemExit(f"gpu_results_doc: {sweep} names {len(chosen)} sweeps of {names}; add :SUBDIR")
        return chosen[0]

    def analysis(self, sweep: str, reference: str | None = None) -> Analysis:
        if (sweep, reference) not in self._analyses:
            self._analyses[sweep, reference] = analyze(self.sweep_dir(sweep), reference=reference, warn=None)
        return self._analyses[sweep, reference]


def _files_only(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
    """Files and directories only: a pack's links (submitit's, to absolute paths) are not read."""
    return tarfile.data_filter(member, path) if member.isfile() or member.isdir() else None


def sweep_dirs(directory: Path) -> list[Path]:
    """The sweep directories (those with a manifest) under `directory`, sorted."""
    return sorted(manifest.parent for manifest in directory.rglob(MANIFEST_FILE))


def provenance(packs: Packs, sweeps: list[str]) -> str:
    """One line per sweep: the commit its run rows recorded, dirty or not, GPU, torch and day."""
    lines = []
    for sweep in sweeps:
        runs = pd.concat(
            pq.read_table(
                path, columns=[c for c in PROVENANCE if c in pq.read_schema(path).names]
            ).to_pandas()
            for path in sorted((packs.sweep_dir(sweep) / CELLS_DIR).glob(f"*/{RUN_FILE}"))
        )
        shas = sorted(set(runs["git_sha"].dropna())) if "git_sha" in runs else []
        if not shas:
            ran = "a commit not recorded (run rows from before `git_sha`)"
        else:
            ran = " and ".join(
                f"{sha.removesuffix(DIRTY)[:10]} with uncommitted changes"
                if sha.endswith(DIRTY)
                else sha[:10]
                for sha in shas
            )
        days = sorted(set(pd.to_datetime(runs["started_at"]).dt.strftime("%Y-%m-%d")))
        gpus = ", ".join(sorted(set(runs["gpu_name"].dropna()))) or "no GPU"
        torch = ", ".join(sorted(set(runs["torch_version"].dropna())))
        lines.append(f"- `{sweep}`: ran at {ran}; {gpus}, torch {torch}, {', '.join(days)}")
    return "\n".join(lines) + "\n"


def table(
    packs: Packs,
    sweeps: list[str],
    name: str,
    reference: str | None = None,
    columns: str = "",
    where: str = "",
) -> str:
    """The analysis' table `name` of each sweep, rows one after another, as Markdown: the `columns`
    given (`;` between them; default all), the rows whose column `where` is not empty (default all)."""
    texts = []
    for sweep in sweeps:
        found = [t for t in packs.analysis(sweep, reference).tables if t.name == name]
        if not found:
            raise SystemExit(f"gpu_results_doc: {sweep} has no table {name!r}")
        texts.append(found[0].text)
    text = pd.concat(texts, ignore_index=True)
    if where:
        text = text[text[where].fillna("").astype(str) != ""]
    chosen = columns.split(";") if columns else list(text.columns)
    return render_markdown(text[chosen].to_dict("records"), chosen) + "\n"


def energy(packs: Packs, sweeps: list[str]) -> str:
    """Per compiled cell with an eager baseline: both cells' J/step, the speedup and energy ratio,
    compile kJ, break-even, how repeats=auto stopped, and what the verdict cost (GPU-s, kJ)."""
    rows = []
    for sweep in sweeps:
        analysis = packs.analysis(sweep)
        tables = {t.name: t.text.set_index(t.text.columns[0] if t.name != "auto_repeats" else "cell_id")
                  for t in analysis.tables}  # fmt: skip
        energy_text, metrics = tables["energy"], analysis.metrics.set_index("cell_id")
        stops = tables.get("auto_repeats")
        for cell_id, cell in metrics.iterrows():
            baseline = cell["baseline_cell_id"]
            if cell["backend"] == "eager" or pd.isna(baseline) or cell_id not in energy_text.index:
                continue
            own, eager = energy_text.loc[cell_id], energy_text.loc[baseline]
            steps, kj = own["break-even steps"], own["break-even kJ"]
            stopped = "" if stops is None else ", ".join(stops.loc[cell_id, ["runs", "stopped by"]])
            rows.append({
                "cell": f"{own['workload']}, {cell['precision']}",
                "backend": cell["backend"],
                "eager J/step [95% CI] (W)": f"{eager['J/step [95% CI]']} ({eager['avg W']})",
                "J/step [95% CI] (W)": f"{own['J/step [95% CI]']} ({own['avg W']})",
                "speedup [95% CI]": own["speedup [95% CI]"],
                "energy ratio [95% CI]": own["energy ratio [95% CI]"],
                "verdict": cell["verdict"],
                "compile kJ": own["compile kJ"],
                "break-even": f"{steps} steps, {kj} kJ" if kj else (f"{steps} steps" if steps else "never"),
                "auto: runs, stopped by": stopped,
                "cost GPU-s, kJ": f"{fmt_number(cell['cost_gpu_s'])}, {fmt_number(cell['cost_j'] / 1e3)}",
            })  # fmt: skip
    return render_markdown(rows, list(rows[0])) + "\n"


def _ratio(cell: pd.Series, prefix: str) -> str:
    """`1.330x [1.293, 1.398]` of the metrics' `prefix`, `prefix`_low and _high ('' where none)."""
    if pd.isna(cell[prefix]):
        return ""
    return f"{cell[prefix]:.3f}x [{cell[f'{prefix}_low']:.3f}, {cell[f'{prefix}_high']:.3f}]"


def across(packs: Packs, runs: list[str], unpaired: str = "", rows_of: str = "", geomean: str = "") -> str:
    """Each compiled cell's speedup in several sweeps of the same cells, `LABEL@SWEEP` each (sweeps
    with one label are read together): a column per label, the centres' distance where there are
    two labels (larger over smaller, - 1), with `unpaired=1` the speedups against the separate
    eager cell too, with `rows_of=LABEL` only the cells that LABEL's sweeps have, with `geomean=1` a
    last row: each column's geometric mean over the cells it has."""
    labels: dict[str, list[str]] = {}
    for run in runs:
        label, _, sweep = run.partition("@")
        labels.setdefault(label, []).append(sweep)
    rows: dict[str, dict[str, str]] = {}
    centres: dict[str, dict[str, float]] = {}
    for label, sweeps in labels.items():
        for sweep in sweeps:
            for _, cell in packs.analysis(sweep).training.iterrows():
                if cell["backend"] == "eager" or pd.isna(cell["speedup"]):
                    continue
                name = f"{cell['arch']} {cell['size']} b{cell['batch_size']} · {cell['backend']}"
                row = rows.setdefault(name, {"cell": name})
                row[f"{label} [95% CI]"] = _ratio(cell, "speedup")
                centres.setdefault(name, {})[label] = cell["speedup"]
                if unpaired:
                    row[f"{label} unpaired [95% CI]"] = _ratio(cell, "unpaired_speedup")
    if rows_of:
        rows = {name: row for name, row in rows.items() if rows_of in centres[name]}
    columns = ["cell", *(f"{label} [95% CI]" for label in labels)]
    if geomean:
        means = {}
        for label in labels:
            values = [centres[name][label] for name in rows if label in centres[name]]
            means[f"{label} [95% CI]"] = (
                f"{math.exp(sum(map(math.log, values)) / len(values)):.3f}x ({len(values)})"
            )
    if len(labels) == 2:
        columns.append("centres apart")
        for name, row in rows.items():
            both = list(centres[name].values())
            row["centres apart"] = f"{max(both) / min(both) - 1:.1%}" if len(both) == 2 else ""
    if unpaired:
        columns += [f"{label} unpaired [95% CI]" for label in labels]
    table = list(rows.values()) + ([{"cell": "geometric mean (cells)", **means}] if geomean else [])
    return render_markdown(table, columns) + "\n"


def span(packs: Packs, sweeps: list[str]) -> str:
    """Per sweep, its attempts' first start to last end (the GPU's wall time, compiles included),
    and the sum over the sweeps."""
    rows, total = [], 0.0
    for sweep in sweeps:
        attempts = packs.analysis(sweep).data.attempts
        seconds = (attempts["finished_at"].max() - attempts["started_at"].min()).total_seconds()
        total += seconds
        rows.append({"sweep": f"`{sweep}`", "first start to last end": f"{seconds:.0f} s"})
    rows.append({"sweep": "all", "first start to last end": f"{total / 60:.1f} min"})
    return render_markdown(rows, list(rows[0])) + "\n"


def compared(packs: Packs, sweeps: list[str]) -> str:
    """`compilebench compare A B` of two sweeps (analysis/compare/), the packs named as A and B."""
    a, b = sweeps
    comparison = compare(packs.analysis(a), packs.analysis(b))  # each opened once, as analyze opens it
    text = to_markdown(comparison, Path(a), Path(b))
    return text.split("\n", 2)[2] + "\n"  # without its heading: the doc has its own


KINDS = {
    "provenance": provenance,
    "table": table,
    "energy": energy,
    "across": across,
    "compare": compared,
    "span": span,
    "machines": machines,
    "host_model": host_model,
}


def derive(spec: str, packs: Packs) -> str:
    """The body of the block whose marker says `spec`."""
    kind, *words = shlex.split(spec)
    if kind not in KINDS:
        raise SystemExit(
            f"gpu_results_doc: unknown kind {kind!r} in <!-- derived: {spec} --> ({', '.join(KINDS)})"
        )
    options = dict(word.split("=", 1) for word in words if "=" in word)
    sweeps = [word for word in words if "=" not in word]
    return KINDS[kind](packs, sweeps, **options)


#: Each worker process's packs (unpacked and analysed once per process), made at its first block.
_worker_packs: Packs | None = None


def _derive_in_worker(spec: str, root: Path) -> str:
    global _worker_packs
    if _worker_packs is None:
        _worker_packs = Packs(root)
    return derive(spec, _worker_packs)


def regenerated(doc: str, root: Path) -> str:
    """`doc` with every derived block's body re-derived, the blocks shared among a process per CPU
    (the analyses dominate: ~12 s of CPU for the doc's blocks, done twice as fast on 2 cores)."""
    specs = list(dict.fromkeys(m.group("spec") for m in BLOCK.finditer(doc)))
    workers = max(1, min(len(specs), len(os.sched_getaffinity(0))))
    with ProcessPoolExecutor(workers) as pool:
        bodies = dict(zip(specs, pool.map(_derive_in_worker, specs, [root] * len(specs)), strict=True))
    return BLOCK.sub(lambda m: m.group(1) + bodies[m.group("spec")] + m.group(4), doc)


def verdicts(packs: Packs, sweeps: list[str]) -> str:
    """One line per cell of each sweep, as the per-cell table prints it: sweep, cell_id, the cell's
    label -> verdict, speedup [95% CI]."""
    lines = []
    for sweep in sweeps:
        summary = next((t for t in packs.analysis(sweep).tables if t.name == SUMMARY), None)
        if summary is None:  # GEMM cells only: no verdicts
            continue
        labels = summary.compact.text["cell"] if summary.compact is not None else summary.text["cell"]
        for label, (_, row) in zip(labels, summary.text.iterrows(), strict=True):
            lines.append(f"{sweep}\t{row['cell']}\t{label}\t-> {row['verdict']}\t{row['speedup [95% CI]']}")
    return "\n".join(lines) + "\n"


@cache
def all_sweeps() -> list[str]:
    """Every sweep of every pack, `TARBALL[:SUBDIR]`."""
    sweeps = []
    for tarball in sorted(RESULTS.rglob("*.tar.gz")):
        with tarfile.open(tarball) as archive:
            manifests = sorted(m.name for m in archive.getmembers() if m.name.endswith("/" + MANIFEST_FILE))
        name = tarball.relative_to(RESULTS).as_posix()
        sweeps += (
            [name] if len(manifests) == 1 else [f"{name}:{Path(m).parent.as_posix()}" for m in manifests]
        )
    return sweeps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the doc's derived blocks")
    parser.add_argument("--verdicts", nargs="*", metavar="SWEEP", help="print cell -> verdict (default: all)")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    if not args.doc.is_file():
        raise SystemExit(f"gpu_results_doc: no doc {args.doc}")
    with tempfile.TemporaryDirectory() as root:
        if args.verdicts is not None:
            sys.stdout.write(verdicts(Packs(Path(root)), args.verdicts or all_sweeps()))
            return 0
        doc = args.doc.read_text()
        new = regenerated(doc, Path(root))
    if args.write:
        args.doc.write_text(new)
        return 0
    if new != doc:
        diff = difflib.unified_diff(doc.splitlines(True), new.splitlines(True), str(args.doc), "derived")
        sys.stdout.writelines(diff)
        print(f"{args.doc.name}: derived blocks differ from the packs; {HINT}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
