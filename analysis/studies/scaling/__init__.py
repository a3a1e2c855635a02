"""Scaling over processes (DDP): the table and the figure."""
