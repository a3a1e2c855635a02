"""Energy per step and what compiling saves of it: the tables and the figure."""
