"""What one visitor explores, kept in their session: the decoded result, its what-if branches and what to say of the
input. The sidebar asks for these and draws them; nothing here draws."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from transformer.decoding.degenerate import UNSURE_BELOW, decode_notes
from transformer.decoding.forcing import branch
from transformer.decoding.result import DecodeResult, truncation_note
from transformer.io.checkpoint import Checkpoint
from transformer.io.metadata import read_metadata
from ui.services import checkpoints, models
from ui.state import keys
from ui.state.identity import ResultIdentity


@dataclass(frozen=True)
class Explored:
    """What the pages draw: the loaded checkpoint and the visitor's current result."""

    checkpoint: Checkpoint
    checkpoint_name: str
    checkpoint_key: str
    text: str  # the sentence as decoded (after any cut to MAX_CHARACTERS)
    result: DecodeResult  # the what-if branch when one is being explored, else the decode
    original: DecodeResult
    notes: tuple[str, ...]  # what the visitor should know about their input

    @property
    def identity(self) -> ResultIdentity:
        """The result's identity, for the caches of what is computed from it and for the players."""
        return ResultIdentity.of(self.checkpoint_key, self.result)


def is_kept(request: keys.DecodeRequest) -> bool:
    """Whether the session's result is already this request's."""
    return st.session_state.get("result_request") == request


def keep_decoded(checkpoint: Checkpoint, request: keys.DecodeRequest) -> None:
    """Decodes `request` into the session, which ends any what-if branch of the result before it. Raises what
    decoding raises (DecodeInputError, torch.OutOfMemoryError), changing nothing."""
    session = st.session_state
    result = models.decode_cached(checkpoint, request.checkpoint_key, request.text, request.settings)
    session.result_request = request
    session.result = result
    session.pop("branch", None)
    session.pop("branch_from", None)


def explored(checkpoint: Checkpoint, name: str, key: str, notes: tuple[str, ...]) -> Explored:
    """The session's result as the pages draw it: the what-if branch where one is shown, else the decode."""
    session = st.session_state
    result = session.result
    active = session.get("branch") if session.get("show_branch") and session.get("branch") else result
    return Explored(checkpoint, name, key, session.applied_text, active, result, notes)


def input_notes(checkpoint: Checkpoint, text: str, result: DecodeResult, shipped: str | None) -> tuple[str, ...]:
    """What the visitor should know of their input and its output. `shipped`: the name of the shipped file in use
    (None for an upload), whose own unsure threshold may be known."""
    notes = []
    if len(st.session_state.get("text", "")) > keys.MAX_CHARACTERS:
        notes.append(f"The text is longer than {keys.MAX_CHARACTERS:,} characters; only its beginning was read.")
    if result.truncated:
        notes.append(truncation_note(checkpoint.tokenizer, checkpoint.config.max_len))
    measured = UNSURE_BELOW.get(shipped)
    unsure_below = UNSURE_BELOW[checkpoints.DEFAULT_CHECKPOINT.stem] if measured is None else measured
    eos = checkpoint.tokenizer.id_to_piece(checkpoint.config.eos_id)
    source = checkpoints.language_display(read_metadata(checkpoint.metadata).src_lang)
    notes += decode_notes(result, eos, unsure_below, calibrated=measured is not None, source_language=source)
    unknown = checkpoint.tokenizer.unknown_parts(text)
    if unknown:
        shown = " ".join(repr(c) for c in unknown[:20])
        notes.append(f"Not in this model's vocabulary, read as the unknown token <unk>: {shown}")
    return tuple(notes)


def take_branch(checkpoint: Checkpoint, chain: tuple[tuple[int, int], ...]) -> bool:
    """Shows the what-if branch reached from the session's result by `chain`, (step, token id) pairs each
    taking one of its output's candidates; False, changing nothing, where a pair (a link's) is no candidate."""
    output = st.session_state.result
    for step, token in chain:
        output = _branched(checkpoint, output, step, token)
        if output is None:
            return False
    _show_branch(output, chain)
    return True


def take_prefix(checkpoint: Checkpoint, prefix: list[int]) -> bool:
    """Shows the output that starts with `prefix` (a beam hypothesis) and goes on greedily, as the chain of what-if
    branches from the session's result that forces it (one where the output so far first differs), so that its
    link opens it as any branch's does; False, changing nothing, where a token is no candidate."""
    output, chain = st.session_state.result, []
    for step, token in enumerate(prefix):
        if step < output.steps and output.tgt_ids[step] == token:
            continue
        output = _branched(checkpoint, output, step, token)
        if output is None:
            return False
        chain.append((step, token))
    _show_branch(output, tuple(chain))
    return True


def _branched(checkpoint: Checkpoint, output: DecodeResult, step: int, token: int) -> DecodeResult | None:
    """The what-if branch of `output` taking `token` at `step`; None where it is not one of that step's candidates."""
    if not (0 <= step < output.steps and token in output.topk_ids[step].tolist()):
        return None
    return branch(checkpoint.model, checkpoint.tokenizer, output, step, token)


def _show_branch(output: DecodeResult, chain: tuple[tuple[int, int], ...]) -> None:
    """Shows `output`, reached by `chain` (none: the session's result itself)."""
    session = st.session_state
    if chain:
        session.branch, session.branch_from, session.show_branch = output, chain, True
    else:
        session.show_branch = False
