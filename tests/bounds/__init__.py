"""What judges verifiers: the multi-step LP, its certificates, classes and gaps (verispec.bounds)."""
