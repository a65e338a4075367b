"""Every registered rule: closed forms, sampling twins, negative controls, user rules and the generated lists
(verispec.verifiers)."""
