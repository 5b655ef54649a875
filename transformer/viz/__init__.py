"""Every Plotly figure: pure builders from arrays and tokens to a Figure, one shared style; the HTML report."""

from transformer.viz.attention import attention_grid, attention_heatmap, step_attention
from transformer.viz.charts import token_probabilities
from transformer.viz.notebook import exportable_figures

__all__ = ["attention_grid", "attention_heatmap", "exportable_figures", "step_attention", "token_probabilities"]
