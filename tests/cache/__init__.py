"""Tests of the cache-concepts model (kvmodel.cache) and its TS-* rules."""
