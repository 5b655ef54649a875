"""Training and evaluation: batches, the loop (one process or several), its resumable state, scores."""
