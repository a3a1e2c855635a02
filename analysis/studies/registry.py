"""The studies of a report, in one list: `studies_for(reference)`.

Their order is the order of the report's tables and figures: the sweep's own tables first (the
per-cell table, status counts, geometric means, break-even), then what only some sweeps have, the
reference's claims last. A new study is one `Study` subclass (analysis/studies/base.py), added here.
"""

from __future__ import annotations

from analysis.studies.auto_repeats import AutoRepeats
from analysis.studies.base import Study
from analysis.studies.energy.tables import Energy
from analysis.studies.fp8 import Fp8AgainstBf16
from analysis.studies.gemm.claims import Fp8TritonClaims
from analysis.studies.gemm.layer import Fp8TritonLayerClaims, GemmLayer
from analysis.studies.gemm.table import Gemm
from analysis.studies.reasons import Reasons
from analysis.studies.scaling.table import Scaling
from analysis.studies.seminar.claims import SeminarClaims
from analysis.studies.seminar.tables import SeminarTables
from analysis.studies.suite import Suite
from analysis.studies.sweep.summaries import SweepTables
from analysis.studies.versions import Versions

STUDIES: list[Study] = [
    SweepTables(),
    Scaling(),
    Energy(),
    AutoRepeats(),
    Fp8AgainstBf16(),
    Versions(),
    Reasons(),
    Suite(),
    SeminarTables(),
    Gemm(),
    GemmLayer(),
    SeminarClaims(),
    Fp8TritonClaims(),
    Fp8TritonLayerClaims(),
]


def studies_for(reference: str | None) -> list[Study]:
    """The studies of a report: every study of every sweep, and those of `reference` (None: none)."""
    return [study for study in STUDIES if study.reference in (None, reference)]
