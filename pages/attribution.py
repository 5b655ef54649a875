"""Attribution beside attention: what each output token drew on, by attention, by gradients and by ALTI+ (through
the whole model), side by side."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st

from transformer.analysis.attribution.gradients import DEFAULT_STEPS, MIN_STEPS, interpolation_steps
from transformer.analysis.attribution.measures import Attribution, agreement, nan_mean
from transformer.analysis.contributions import Contributions
from transformer.analysis.words import over_words
from transformer.io.export import csv_text, npz_bytes, position_labels
from transformer.model.heads import head_name, layer_name
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable
from transformer.viz.attribution import MEASURE_COLOURS, UNSIGNED, measures_over_tokens
from transformer.viz.charts import lines
from transformer.viz.matrices import matrix_heatmap
from transformer.viz.style import plotly_text
from ui.services import models
from ui.services.explorer import Explored
from ui.services.work import ATTRIBUTION_BUDGET, heavy_job
from ui.state import url
from ui.widgets import frame
from ui.widgets.charts import show, table
from ui.widgets.controls import layer_head, words_toggle
from ui.widgets.controls import step as controls_step
from ui.widgets.progress import ProgressBar, stop_button
from ui.widgets.text import literal

GRADIENTS = ("gradient × input", "integrated gradients")  # signed: red raised the token's probability, blue lowered it
EXPLANATIONS = {
    "cross-attention": "the weights p_attn of the chosen head (or their mean): where the head looked. A head may "
    "look hard at a token whose value vector is nearly zero, so a large weight need not mean a large effect.",
    "value-weighted": "the norm of each weighted, transformed value, ‖α f(x)‖ (Kobayashi et al., 2020): what the "
    "head actually added from each token. It equals the weights when every value vector has the same norm.",
    "gradient × input": "how much the output token's log-probability changes, to first order, as each token's "
    "embedding is scaled: local, and blind to saturation (a token may matter yet have a flat gradient).",
    "integrated gradients": "the same change accumulated along a straight path from all-zero embeddings to the real "
    "ones (Sundararajan et al., 2017); the attributions sum to the change in log-probability. It depends on the "
    "baseline chosen (zero embeddings here) and is approximate: the convergence delta says by how much.",
}

INTRO = (
    "For each output token: where cross-attention looked, and what the token really drew on by gradients, "
    "on the same source tokens. Follows the decode explorer's step."
)
SIGNED = "(red raises the token's probability)"
EVERY_STEP_TABS = (
    "cross-attention",
    "value-weighted",
    "gradient × input",
    "integrated gradients",
    "ALTI+",
    "output so far",
)


@dataclass(frozen=True)
class Reading:
    """Every attribution of the result, and the head, step and grouping the visitor reads them at."""

    explored: Explored
    found: Attribution
    contributions: Contributions
    layer: int
    head: int
    mean: bool  # the mean over heads instead of the head
    words: bool
    step: int
    n_steps: int  # integrated gradients' interpolation steps

    @property
    def alti(self) -> np.ndarray:
        """ALTI+'s shares of the source, each output token a row."""
        return self.contributions.alti_plus[:, : len(self.explored.result.src_ids)]

    @property
    def which(self) -> str:
        return f"{layer_name(self.layer)}, {'mean over heads' if self.mean else f'{head_name(self.head)}'}"

    def attention_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The chosen head's (or the heads' mean) cross-attention and value-weighted rows, each output step a row."""
        cross = self.explored.result.cross.numpy()[self.layer]
        weighted = self.found.value_weighted[AttentionKind.CROSS][self.layer]
        return (cross.mean(0), weighted.mean(0)) if self.mean else (cross[self.head], weighted[self.head])

    @property
    def piece(self) -> str:
        return readable(self.explored.result.tgt_pieces[self.step])


def budgeted_steps(explored: Explored) -> int:
    """Integrated gradients' interpolation steps within the server's budget (fewer on a long decode, said); stops
    where even the fewest would exceed it."""
    result = explored.result
    tokens = len(result.src_ids) + result.steps
    n_steps = interpolation_steps(result.steps, tokens, ATTRIBUTION_BUDGET)
    work = f"{result.steps} output tokens × {tokens} tokens × the interpolation steps"
    if n_steps is None:
        st.warning(
            f"This decode is too long for attribution on this server: {work} would exceed the "
            f"{ATTRIBUTION_BUDGET:,} token-steps a request may take here, even at {MIN_STEPS} steps. Shorten "
            "the sentence, or run `python -m transformer attribute --text ...` on your own machine."
        )
        st.stop()
    if n_steps < DEFAULT_STEPS:
        st.info(
            f"This decode is long ({work}): integrated gradients take {n_steps} interpolation steps instead of "
            f"{DEFAULT_STEPS}, to stay within the {ATTRIBUTION_BUDGET:,} token-steps a request may take here "
            "(the convergence delta below says how exact they are)."
        )
    return n_steps


def computed(explored: Explored, n_steps: int) -> Attribution:
    """Every attribution of the result, in a heavy-job slot, with the bar and its Stop (stopped: the way to start
    again, and the page stops)."""
    result, checkpoint, session = explored.result, explored.checkpoint, st.session_state
    request = explored.identity
    stop = st.empty()  # Stop while computing; once stopped, the way to start again (the page computes on opening)
    if session.get("attribution_stopped") == request:
        if stop.button("Compute the attributions", key="attribution_resume", type="primary"):
            session.pop("attribution_stopped")
            st.rerun()
        st.info("Attribution stopped: nothing was computed for this output.")
        st.stop()
    if stop_button("attribution_stop", stop):  # pressed: this rerun ended the computation at its last update
        session.attribution_stopped = request
        st.rerun()
    with heavy_job("attributions") as should_stop:
        # Each step's backward pass runs through the whole input: their costs are equal
        timed = ("attribution", explored.checkpoint_key, result.steps * (len(result.src_ids) + result.steps) * n_steps)
        # One unit more than the output's tokens: the other measures, after the integrated gradients
        progress = ProgressBar("Attribution", result.steps + 1, "output tokens' worth", timed=timed)
        found = models.attribution_cached(
            checkpoint,
            request,
            n_steps,
            _result=result,
            _should_stop=should_stop,
            _progress=progress,
        )
        progress.close()
    stop.empty()
    return found


def read_at(explored: Explored, found: Attribution, n_steps: int) -> Reading:
    """The head, grouping and step the visitor chooses."""
    result = explored.result
    contributions = models.contributions_cached(explored.checkpoint, explored.identity, _result=result)
    # Two rows: five controls in one left each a sliver beside the open sidebar of a 1024-pixel screen.
    heads_row, steps_row = st.columns([1, 1, 2]), st.columns(2)
    layer, head = layer_head(result, AttentionKind.CROSS, heads_row[0], heads_row[1])
    url.from_link("attribution_mean", "mean", (False, True), url.flag_text)
    mean = heads_row[2].toggle("Mean over heads", key="attribution_mean")
    words = words_toggle(steps_row[0])
    with steps_row[1]:
        step = controls_step(result) or 0
    return Reading(explored, found, contributions, layer, head, mean, words, step, n_steps)


def step_measures(reading: Reading) -> tuple[dict[str, np.ndarray], list[str]]:
    """The five measures of the step over the source, drawn; them, and the source's labels."""
    result, found, step, words, which = (
        reading.explored.result,
        reading.found,
        reading.step,
        reading.words,
        reading.which,
    )
    cross_rows, weighted_rows = reading.attention_rows()
    st.subheader(f"Step {step + 1}: {literal(reading.piece)}")
    measures = {
        f"cross-attention ({which})": cross_rows[step],
        f"value-weighted ({which})": weighted_rows[step],
        "gradient × input": found.gradient_x_input[step],
        "integrated gradients": found.integrated_gradients[step],
        "ALTI+ (whole model)": reading.alti[step],
    }
    measures = {name: over_words(values, result.src_pieces, words)[0] for name, values in measures.items()}
    _, source_labels = over_words(cross_rows, result.src_pieces, words)
    show(
        measures_over_tokens(
            measures,
            source_labels,
            f"what produced '{plotly_text(reading.piece)}': five measures over the source",
            signed=GRADIENTS,
        ),
        key="attribution_step",
    )
    return measures, source_labels


def step_summary(reading: Reading) -> None:
    """How the step's measures agree, how exact its integrated gradients are, and what they say of its prefix."""
    found, step, words, alti_found, alti = (
        reading.found,
        reading.step,
        reading.words,
        reading.contributions,
        reading.alti,
    )
    st.caption(
        "Each row as shares of its total |value|. Attention and ALTI+ (green) are never negative; the gradients' "
        "rows keep their sign: red raised the token's probability, blue lowered it, as in the tabs below. ALTI+ "
        "follows each token's share through every layer, the residual paths and the layer norms included (Ferrando "
        "et al. 2022)."
    )
    alti_agreement = agreement(alti[None, None], found.integrated_gradients)[0, 0]
    alti_rho = float(nan_mean(alti_agreement))
    best_head = np.nanmax(found.agreement) if np.isfinite(found.agreement).any() else float("nan")
    st.markdown(
        f"ALTI+ puts **{alti_found.source_share[step]:.0%}** of this step on the source. It ranks the source "
        f"tokens as integrated gradients do with Spearman's ρ = **{alti_rho:.2f}** on average over the steps (the "
        f"best single head's cross-attention: {best_head:.2f})."
    )
    share = float(found.source_share[step])
    difference = float(found.log_probs[step] - found.baseline_log_probs[step])
    delta = float(found.convergence_delta[step])
    st.markdown(
        f"Integrated gradients put **{share:.0%}** of their weight on the source and **{1 - share:.0%}** on the "
        f"output so far. They explain a change of log-probability of {difference:.2f} (from "
        f"{found.baseline_log_probs[step]:.2f} with zero embeddings to {found.log_probs[step]:.2f}), to within "
        f"{abs(delta):.3f} (captum's convergence delta)."
    )
    if abs(delta) > 0.1 * max(abs(difference), 1e-6):
        st.warning(
            "At this step the path integral is coarse (the delta is over a tenth of the change): read the "
            "integrated gradients as approximate."
        )
    prefix, prefix_labels = over_words(
        found.integrated_gradients_target[step, : step + 1], found.decoder_input_pieces[: step + 1], words
    )
    show(
        measures_over_tokens(
            {"integrated gradients": prefix},
            prefix_labels,
            "...and over the output so far (the decoder's input)",
            signed=GRADIENTS,
        ),
        key="attribution_prefix",
    )


def every_step(reading: Reading, source_labels: list[str]) -> None:
    """Each measure over every step, one tab a measure, and the share on the source per step."""
    result, found, step = reading.explored.result, reading.found, reading.step
    cross_rows, weighted_rows = reading.attention_rows()
    st.subheader("Over every step")
    tabs = st.tabs(EVERY_STEP_TABS)
    source_axes = dict(
        row_pieces=result.tgt_pieces, column_pieces=source_labels, highlight_row=step, x_title="source token"
    )
    over_the_source = [  # (rows, title, shares that sum to one, key)
        (cross_rows, f"cross-attention, {reading.which}", True, "all_cross"),
        (weighted_rows, f"value-weighted cross-attention, {reading.which}", True, "all_weighted"),
        (found.gradient_x_input, f"gradient × input {SIGNED}", False, "all_gradient"),
        (found.integrated_gradients, f"integrated gradients {SIGNED}", False, "all_integrated"),
        (reading.alti, "ALTI+: each output token's shares of the source, through the whole model", True, "all_alti"),
    ]
    for tab, (rows, title, shares, key) in zip(tabs, over_the_source):
        with tab:
            matrix = over_words(rows, result.src_pieces, reading.words)[0]
            # Shares in the top figure's green: blue on this page means "lowered the probability"
            colours = dict(probabilities=shares, sequential=UNSIGNED, upright_columns=True)
            show(matrix_heatmap(matrix, title, y_title="output token", **colours, **source_axes), key=key)
    with tabs[5]:
        target = over_words(found.integrated_gradients_target, found.decoder_input_pieces, reading.words)
        title = "integrated gradients over the output so far"
        labels = (result.tgt_pieces, target[1], step, "decoder input token", "output token")
        show(matrix_heatmap(target[0], title, *labels, upright_columns=True), key="all_prefix")
    steps = list(range(1, result.steps + 1))  # below the tabs: a seventh ran past a projector's 1024 px
    shares = {
        "integrated gradients": (steps, found.source_share.tolist()),
        "ALTI+": (steps, reading.contributions.source_share.tolist()),
    }
    figure = lines(shares, "share on the source, per step", "step", "share", MEASURE_COLOURS)
    show(figure, key="all_share")


def agreeing_heads(reading: Reading) -> None:
    """Each head's agreement with integrated gradients, over the steps and at this one."""
    found, step = reading.found, reading.step
    layers, heads = reading.explored.result.cross.shape[:2]
    st.subheader("Which heads agree with the gradients")
    st.caption(
        "Spearman's rank correlation between each head's cross-attention row and |integrated gradients| over the "
        "source: 1 ranks the tokens alike, 0 unrelated, −1 reversed. Click a column to sort."
    )
    names = [f"{layer_name(i)} · {head_name(h)}" for i in range(layers) for h in range(heads)]
    agreement = pd.DataFrame(
        {
            "mean over steps": found.agreement.reshape(-1),
            f"at step {step + 1}": found.agreement_per_step[..., step].reshape(-1),
        },
        index=pd.Index(names, name="head"),
    ).sort_values("mean over steps", ascending=False)
    table(agreement.style.format("{:.2f}", na_rep="—"), width="stretch", height=300, key="agreement_table")


def contrastive(reading: Reading, source_labels: list[str]) -> tuple[int | None, list[int]]:
    """Integrated gradients of the difference between the token and a foil the visitor picks; the foil and the
    candidates it was picked from."""
    explored, step, n_steps, piece = reading.explored, reading.step, reading.n_steps, reading.piece
    result, checkpoint = explored.result, explored.checkpoint
    st.subheader("Contrastive: why this token rather than another")
    candidates = [int(i) for i in result.topk_ids[step].tolist() if int(i) != result.tgt_ids[step]]
    url.from_link(f"attribution_foil_{step}", "foil", candidates)
    foil = st.selectbox(
        "Rather than",
        candidates,
        format_func=lambda i: readable(checkpoint.tokenizer.id_to_piece(i)),
        key=f"attribution_foil_{step}",
    )
    if foil is not None:
        with heavy_job("attributions") as should_stop:
            # One backward pass through the source and the output so far, at every interpolation point
            timed = ("contrastive", explored.checkpoint_key, (len(result.src_ids) + step + 1) * n_steps)
            progress = ProgressBar("Integrated gradients of the difference", 1, "passes", timed=timed)
            source, prefix_rows, foil_delta = models.contrastive_cached(
                checkpoint,
                explored.identity,
                step,
                foil,
                n_steps,
                _result=result,
                _should_stop=should_stop,
                _progress=progress,
            )
            progress.close()
        foil_piece = readable(checkpoint.tokenizer.id_to_piece(foil))
        show(
            measures_over_tokens(
                {"source": over_words(source, result.src_pieces, reading.words)[0]},
                source_labels,
                f"why '{plotly_text(piece)}' rather than '{plotly_text(foil_piece)}': integrated "
                "gradients of the difference",
                signed=("source",),
            ),
            key="attribution_contrast",
        )
        st.caption(
            f"Red: a token that favoured '{literal(piece)}'; blue: one that favoured '{literal(foil_piece)}'. "
            f"The output so far holds {float(np.abs(prefix_rows).sum()):.2f} of the total |attribution|; "
            f"convergence delta {foil_delta:.3f}."
        )
    return foil, candidates


def downloads(found: Attribution, measures: dict[str, np.ndarray], source_labels: list[str], step: int) -> None:
    """Every attribution as .npz, and the step's measures as CSV."""
    downloads = st.columns(2)
    downloads[0].download_button(
        "Every attribution as .npz",
        lambda: npz_bytes(found.arrays()),
        file_name="attribution.npz",
        mime="application/octet-stream",
        on_click="ignore",
        key="attribution_npz",
    )
    step_table = pd.DataFrame(
        {name: values for name, values in measures.items()},
        index=pd.Index(position_labels(source_labels), name="source token"),
    )
    downloads[1].download_button(
        "This step as CSV",
        csv_text(step_table, float_format="%.6g"),
        file_name=f"attribution-step{step + 1}.csv",
        mime="text/csv",
        on_click="ignore",
        key="attribution_csv",
    )


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    n_steps = budgeted_steps(explored)
    reading = read_at(explored, computed(explored, n_steps), n_steps)
    measures, source_labels = step_measures(reading)
    step_summary(reading)
    every_step(reading, source_labels)
    agreeing_heads(reading)
    foil, candidates = contrastive(reading, source_labels)
    with st.expander("What each measure says, and where it misleads"):
        for name, meaning in EXPLANATIONS.items():
            st.markdown(f"**{name}**: {meaning}")
    downloads(reading.found, measures, source_labels, reading.step)
    url.write_url({"mean": "1" if reading.mean else "", "foil": "" if foil in (None, *candidates[:1]) else str(foil)})


page(frame.draw(__file__))
