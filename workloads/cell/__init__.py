"""The parts of one training cell: its config, the catalogue of what it may ask for, precision,
backends, the measured loop and the recorder of its rows. Built and run by workloads/train_cell.py."""
