"""Trace formats, replay, lockstep driver, reports and the `kvsim` command line."""
