"""Helpers the tests share: simulators and servers to test against, load generators,
recorded models, hypothesis strategies. Not tests themselves (pytest collects none here)."""
