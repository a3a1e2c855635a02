"""The local executor's side inside a cell's process: taking turns on one device with the process
started ahead, and the environment of the processes a cell starts."""
