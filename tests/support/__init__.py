"""Helpers the tests share: broken verifiers (the published traps), tiny model pairs, hypothesis strategies,
scripts."""
