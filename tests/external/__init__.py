"""Verification code written elsewhere: layouts, exact integration, black-box tests, RNG capture
(verispec.external)."""
