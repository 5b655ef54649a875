"""The selected checkpoint: configuration, parameters, training data and curves, scores; and uploads."""

import json

import pandas as pd
import streamlit as st

from transformer.analysis.head_stats import parameter_counts
from transformer.io.checkpoint import CheckpointError
from transformer.viz.charts import lines
from ui import uploads, url
from ui.charts import show
from ui.sidebar import page_frame
from ui.text import literal

explored = page_frame()
checkpoint = explored.checkpoint
config, metadata = checkpoint.config, checkpoint.metadata
st.title("Checkpoints")

with st.expander("Upload a checkpoint (this project's .safetensors format)", expanded=False):
    st.caption(
        f"Up to {uploads.UPLOAD_LIMIT_MB} MB, and up to {uploads.UPLOAD_LIMIT_ELEMENTS:,} parameters for all of your "
        "uploads together. The file is checked before use and never executed (no pickles); "
        "it stays in your session only, for nobody else to see, until you close the tab."
    )
    uploaded = st.file_uploader("Checkpoint file", type=["safetensors"], max_upload_size=uploads.UPLOAD_LIMIT_MB,
                                key="upload_file")  # fmt: skip
    if uploaded is not None and st.session_state.get("upload_done") != uploaded.file_id:
        st.session_state.upload_done = uploaded.file_id
        try:
            name = uploads.add_upload(uploaded.name, uploaded.getvalue())
        except CheckpointError as error:
            st.error(literal(f"{uploaded.name} was refused: {error}"))
        else:
            for warning in st.session_state.get("upload_warnings", []):
                st.warning(literal(warning))
            st.session_state.checkpoint = name
            st.rerun()

st.subheader(literal(explored.checkpoint_name))
languages = metadata.get("languages", {})
training = metadata.get("training", {})
facts = {
    "languages": f"{languages.get('src', '?')} → {languages.get('tgt', '?')}",
    "file size": f"{checkpoint.file_bytes / 1e6:.1f} MB",
    "parameters": f"{config.parameter_count():,}",
    "training time": f"{training['seconds']:.0f} s on {training.get('hardware', '?')}"
    if "seconds" in training
    else "not recorded",
    "steps / epochs": f"{training.get('steps', '?')} / {training.get('epochs_done', '?')}"
    if training
    else "not recorded",
}
left, right = st.columns(2)
with left:
    st.markdown("**Summary**")
    st.dataframe(pd.DataFrame({"value": facts}), width="stretch")
    st.markdown("**Configuration**")
    st.dataframe(pd.DataFrame({"value": {k: str(v) for k, v in json.loads(config.to_json()).items()}}), width="stretch")
with right:
    st.markdown("**Parameters by component**")
    st.dataframe(parameter_counts(checkpoint.model).style.format({"parameters": "{:,}", "share": "{:.1%}"}),
                 width="stretch")  # fmt: skip
    data = metadata.get("data", {})
    if data:
        st.markdown("**Training data**")
        st.dataframe(pd.DataFrame(data).T, width="stretch")
    scores = {k: v for k, v in metadata.get("scores", {}).items() if isinstance(v, dict)}
    if scores:
        st.markdown("**Scores** (sacreBLEU, chrF)")
        st.dataframe(pd.DataFrame(scores).T[["bleu", "chrf", "beam", "sentences"]], width="stretch")

st.subheader("Training curves")
if "loss_curve" in training:
    every = training.get("loss_curve_every", 1)
    steps = [every * (i + 1) for i in range(len(training["loss_curve"]))]
    columns = st.columns(2)
    with columns[0]:
        show(lines({"training loss": (steps, training["loss_curve"])}, "loss per step", "step", "loss"), key="loss")
    with columns[1]:
        if "lr_curve" in training:
            show(lines({"learning rate": (steps, training["lr_curve"])}, "learning rate (Noam schedule)", "step", "lr"),
                 key="lr")  # fmt: skip
    validation = training.get("validation", [])
    if validation:
        epochs = [v["epoch"] for v in validation]
        columns = st.columns(2)
        with columns[0]:
            show(lines({"validation BLEU": (epochs, [v.get("val_bleu", 0) for v in validation])},
                       "validation BLEU per epoch (greedy)", "epoch", "BLEU"), key="val_bleu")  # fmt: skip
        with columns[1]:
            show(lines({"validation loss": (epochs, [v.get("val_loss", 0) for v in validation])},
                       "validation loss per epoch", "epoch", "loss"), key="val_loss")  # fmt: skip
else:
    st.info("This checkpoint carries no training curves (they are written by `python -m transformer train`).")
url.write_url()
