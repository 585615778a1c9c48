"""Fixed prompt sets of the benchmarks (data files)."""
