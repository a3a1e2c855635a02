"""Reading a sweep directory (files only): every run and step file in one scan each (collect.py),
the names, groups and order of cells (axes.py), the environment the runs recorded (environment.py)."""
