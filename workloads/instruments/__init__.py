"""What observes a cell without changing its training: provenance of host and GPU, the host's load,
dynamo's records, the compile cache and the cold compile, the software environment. What observes
an attempt's loop is an `Instrument` (base.py), one of its kind's list (workloads/kinds.py)."""
