"""Files: the checkpoint format (loaded as data, never executed) and exports of a decode result."""

from transformer.io.checkpoint import CHECKPOINT_DIR, Checkpoint, CheckpointError, load_checkpoint, save_checkpoint

__all__ = ["CHECKPOINT_DIR", "Checkpoint", "CheckpointError", "load_checkpoint", "save_checkpoint"]
