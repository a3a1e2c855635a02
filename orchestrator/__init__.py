"""Sweep orchestration, in rooms that import downwards: the command line (cli/), the sweep driver
(sweep/), the executors and what runs a cell (executors/), the grid and its configuration (grid/)."""
