"""Performance figures, each against a baseline measured in the same run: `python -m benchmarks`."""
