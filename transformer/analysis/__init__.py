"""What the recorded attention says: views by kind, words, rollout, head statistics, the stage-by-stage walkthrough."""

from transformer.analysis.rollout import rollout
from transformer.analysis.views import AttentionView, attention_view

__all__ = ["AttentionView", "attention_view", "rollout"]
