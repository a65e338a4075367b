"""The couplings verifiers are built on: optimal transport, maximum flow, single-position optima
(verispec.lp_analysis)."""
