"""Sweep orchestration: expand Hydra overrides into cells, lay out the sweep directory, run cells."""
