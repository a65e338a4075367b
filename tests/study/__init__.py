"""Sweeps, the executor and its backends, row stores, interrupts, and the report (verispec.study, verispec.report)."""
