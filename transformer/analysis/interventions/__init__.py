"""Interventions: changing what the model computes, and watching the output change."""
