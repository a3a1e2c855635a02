"""The statistics every table rests on: bootstrap intervals vectorised over cells, two levels for
replicates (bootstrap.py); what an interval says against a margin, and on which interval a cell's
verdict rests (verdicts.py)."""
