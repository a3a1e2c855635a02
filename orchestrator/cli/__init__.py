"""The command line: `compilebench` and its commands (main), their flags and help (args)."""
