"""What the benchmarks share: not benchmarks themselves."""
