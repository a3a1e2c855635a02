"""Read a sweep directory (files only) into per-cell metrics, tables, figures and a report page."""
