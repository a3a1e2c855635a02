"""The sweep-directory contract: where a sweep's files lie, their Parquet columns, the names of
axes and statuses, and how files are written whole and locked. The orchestrator and the analysis
read and write sweeps through it; it imports neither torch nor any other room of `workloads`."""
