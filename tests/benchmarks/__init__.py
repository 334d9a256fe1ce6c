"""Tests of the scripts in benchmarks/: each run for real with tiny parameters."""
