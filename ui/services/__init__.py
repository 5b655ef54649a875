"""What pages call: checkpoints found and loaded once per server, cached model calls, the shared result cache, heavy-job and page-run slots, uploads and their budgets."""
