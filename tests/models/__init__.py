"""Real language models on tiny config-built pairs: sampling, tree forwards, decoding, derived problems, latency
(verispec.models)."""
