"""DDTE's delay selector: actions, features, labels, datasets, training and evaluation (verispec.selector)."""
