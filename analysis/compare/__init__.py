"""`compilebench compare SWEEP_A SWEEP_B`: the same cells in two sweeps, B against A (method:
docs/analysis.md, "Comparing two sweeps").

The cells are matched by their axes (matching.py); per matched cell, B/A of the measured step, of
end-to-end throughput and of the GPU time per step with their intervals, and the host's µs per launch
on each side (ratios.py); each cell's verdict against the threshold, where a wall step that moved
with the host while the GPU's work held is a `host change`, not an improvement or a regression
(verdicts.py); the cells and the per-backend speedups together (comparison.py), written as Markdown
or JSON (output.py).
"""

from analysis.compare.comparison import Comparison, compare
from analysis.compare.matching import CompareError
from analysis.compare.output import to_json, to_markdown
from analysis.compare.verdicts import THRESHOLD

__all__ = ["THRESHOLD", "CompareError", "Comparison", "compare", "to_json", "to_markdown"]
