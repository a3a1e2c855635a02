"""Every sweep's own study: the per-cell table, full and compact (table.py), status counts,
geometric means and break-even (summaries.py), the figures of its cells (figures.py)."""
