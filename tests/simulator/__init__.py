"""The exact core: problems, draft trees, drafters, the engines and their laws (verispec.simulator), the array
backends, statistics and verdicts."""
