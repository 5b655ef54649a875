"""The selected checkpoint: configuration, parameters, training data and curves, scores; and uploads."""

import json
from dataclasses import asdict

import pandas as pd
import streamlit as st

from transformer.analysis.heads.statistics import parameter_counts
from transformer.io.checkpoint import CheckpointError
from transformer.io.metadata import TrainingRecord, read_metadata
from transformer.viz.charts import lines
from ui.services import uploads
from ui.services.explorer import Explored
from ui.state import url
from ui.widgets import frame
from ui.widgets.charts import show, table
from ui.widgets.text import literal

INTRO = (
    "What the selected model is: its size, configuration and parameters by component, the data it was trained on, "
    "its training curves and scores; and where to add a checkpoint file of your own, kept in your session only."
)


def known(value: object, unit: str = "") -> str:
    return "not recorded" if value is None else f"{value:,.0f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def upload() -> None:
    """A visitor's own checkpoint, checked, for their session only."""
    with st.expander("Upload a checkpoint (this project's .safetensors format)", expanded=False):
        st.caption(
            f"Up to {uploads.UPLOAD_LIMIT_MB} MB, and up to {uploads.UPLOAD_LIMIT_ELEMENTS:,} parameters for all of "
            "your uploads together. The file is checked before use and never executed (no pickles); "
            "it stays in your session only, for nobody else to see, until you close the tab."
        )
        uploaded = st.file_uploader(
            "Checkpoint file", type=["safetensors"], max_upload_size=uploads.UPLOAD_LIMIT_MB, key="upload_file"
        )
        if uploaded is not None and st.session_state.get("upload_done") != uploaded.file_id:
            st.session_state.upload_done = uploaded.file_id
            try:
                name = uploads.add_upload(uploaded)
            except CheckpointError as error:
                st.error(literal(f"{uploaded.name} was refused: {error}"))
            else:
                st.session_state.checkpoint = name
                st.rerun()


def facts(explored: Explored) -> None:
    """What the checkpoint is: its summary, configuration, parameters, data and scores."""
    checkpoint = explored.checkpoint
    config = checkpoint.config
    st.subheader(literal(explored.checkpoint_name))
    about = read_metadata(checkpoint.metadata)
    training = about.training or TrainingRecord()
    facts = {
        "languages": about.language_pair.replace("→", " → "),
        "file size": f"{checkpoint.file_bytes / 1e6:.1f} MB",
        "parameters": f"{config.parameter_count():,}",
        "training time": f"{known(training.seconds, ' s')} on {training.hardware or '?'}",
        "steps / epochs": f"{known(training.steps)} / {known(training.epochs_done)}",
    }
    left, right = st.columns(2)
    with left:
        st.markdown("**Summary**")
        table(pd.DataFrame({"value": facts}), width="stretch")
        st.markdown("**Configuration**")
        table(pd.DataFrame({"value": {k: str(v) for k, v in json.loads(config.to_json()).items()}}), width="stretch")
    with right:
        st.markdown("**Parameters by component**")
        table(
            parameter_counts(checkpoint.model).style.format({"parameters": "{:,}", "share": "{:.1%}"}), width="stretch"
        )
        if about.data:
            st.markdown("**Training data**")
            table(pd.DataFrame(about.data).T, width="stretch")
        if about.scores:
            st.markdown("**Scores** (sacreBLEU, chrF)")
            table(pd.DataFrame({name: asdict(score) for name, score in about.scores.items()}).T, width="stretch")


def training_curves(training: TrainingRecord) -> None:
    """The loss, learning rate and validation scores its run recorded."""
    st.subheader("Training curves")
    if training.loss_curve:
        loss_column, rate_column = st.columns(2)
        with loss_column:
            series = {"training loss": (training.steps_of(training.loss_curve), training.loss_curve)}
            show(lines(series, "loss per step", "step", "loss"), key="loss")
        if training.lr_curve:
            with rate_column:
                series = {"learning rate": (training.steps_of(training.lr_curve), training.lr_curve)}
                show(lines(series, "learning rate (Noam schedule)", "step", "lr"), key="lr")
        if training.validation:
            epochs = [v.epoch for v in training.validation]
            curves = (
                ("val_bleu", "BLEU", "validation BLEU per epoch (greedy)"),
                ("val_loss", "loss", "validation loss per epoch"),
            )
            for column, (field, measure, title) in zip(st.columns(2), curves):
                with column:
                    series = {f"validation {measure}": (epochs, [getattr(v, field) for v in training.validation])}
                    show(lines(series, title, "epoch", measure), key=field)
    else:
        st.info("This checkpoint carries no training curves (they are written by `python -m transformer train`).")


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    upload()
    facts(explored)
    training_curves(read_metadata(explored.checkpoint.metadata).training or TrainingRecord())
    url.write_url()


page(frame.draw(__file__))
