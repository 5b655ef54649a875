"""Files: the checkpoint format (loaded as data, never executed) and exports of a decode result."""

from transformer.io.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint

__all__ = ["Checkpoint", "CheckpointError", "load_checkpoint", "save_checkpoint"]
