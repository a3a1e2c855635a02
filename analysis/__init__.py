"""Read a sweep directory (files only) and summarise it as tables."""
