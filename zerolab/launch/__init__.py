"""Launching a recipe for real: the run directory, the training process tree (streamed
log, signals, exit code), host-memory and GPU sampling, status and resume."""
