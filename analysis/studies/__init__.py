"""What the report shows of a sweep, one folder or module per study, each a `Study` (base.py) that
turns the loaded sweep into tables and figures; one list names them (registry.py)."""
