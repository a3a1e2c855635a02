"""Read a sweep directory (files only) into per-cell metrics, tables, figures and a report page.

`sweep_frames(SWEEP_DIR)` returns the per-cell and per-step tables as DataFrames (analysis/frames.py).
"""

from analysis.frames import SweepFrames, sweep_frames

__all__ = ["SweepFrames", "sweep_frames"]
