"""Benchmarks of the app as a server: a room of visitors, many sessions at once, hostile uploads."""
