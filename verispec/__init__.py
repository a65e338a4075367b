"""verispec: exact-probability simulator and testbed for speculative-decoding verifiers."""

__version__ = "0.1.0"
