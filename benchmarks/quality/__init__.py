"""How well an analysis does its job, on real data (not how fast): each module a command."""
