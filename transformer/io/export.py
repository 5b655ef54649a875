"""Results as plain arrays: the `.npz` and JSON files that `inspect`, `attribute` and the app write."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pandas as pd

from transformer.decoding.lens import LogitLens
from transformer.decoding.result import DecodeResult
from transformer.text.pieces import readable, readable_label
from transformer.text.tokenizer import TokenizerBase


def result_arrays(result: DecodeResult, tokenizer: TokenizerBase) -> dict[str, np.ndarray]:
    """Every attention map (L, H, query, key), the pieces, the per-step top-k candidates and the logit lens, where
    it was read."""
    return {
        "encoder_self": result.encoder_self.numpy(),
        "decoder_self": result.decoder_self.numpy(),
        "cross": result.cross.numpy(),
        "src_ids": np.array(result.src_ids),
        "src_pieces": np.array(result.src_pieces),
        "tgt_ids": np.array(result.tgt_ids),
        "tgt_pieces": np.array(result.tgt_pieces),
        "decoder_input_pieces": np.array(result.decoder_input_pieces),
        **{
            f"{name}_labels": np.array([readable(p) for p in getattr(result, f"{name}_pieces")])
            for name in ("src", "tgt", "decoder_input")
        },  # as the figures show them
        "token_probs": result.token_probs.numpy(),
        "topk_ids": result.topk_ids.numpy(),
        "topk_pieces": np.array([[tokenizer.id_to_piece(i) for i in row] for row in result.topk_ids.tolist()]),
        "topk_probs": result.topk_probs.numpy(),
        "entropy_bits": result.entropy_bits.numpy(),
        **(lens_arrays(result.lens, tokenizer) if result.lens.read else {}),
        "translation": np.array(result.text),
        "strategy": np.array(result.strategy),
    }


def lens_arrays(lens: LogitLens, tokenizer: TokenizerBase) -> dict[str, np.ndarray]:
    """The logit lens' guesses by layer (a decode of a large-vocabulary model leaves them unread: read_lens)."""
    return {
        "layer_top_ids": lens.top_ids.numpy(),
        "layer_top_pieces": np.array(
            [[[tokenizer.id_to_piece(i) for i in row] for row in layer] for layer in lens.top_ids.tolist()]
        ),
        "layer_top_probs": lens.top_probs.numpy(),
        "layer_chosen_rank": lens.chosen_rank.numpy(),
        "layer_chosen_probs": lens.chosen_probs.numpy(),
    }


def to_npz(result: DecodeResult, tokenizer: TokenizerBase) -> bytes:
    return npz_bytes(result_arrays(result, tokenizer))


def to_json(result: DecodeResult, tokenizer: TokenizerBase) -> str:
    return json_text(result_arrays(result, tokenizer))


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def json_text(arrays: dict[str, np.ndarray]) -> str:
    """Arrays as JSON lists; NaN (an undefined correlation, say) as null, which JSON has and NaN it has not."""
    return json.dumps({name: _nan_to_none(array.tolist()) for name, array in arrays.items()}, allow_nan=False)


def _nan_to_none(value):
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return None if isinstance(value, float) and value != value else value


# Text a spreadsheet would read as a formula (OWASP's CSV injection: "=HYPERLINK(...)" in a visitor's sentence):
# such a cell gets a leading apostrophe, which spreadsheets show as text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """value, with an apostrophe before it where it is text that starts like a formula."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def csv_text(frame: pd.DataFrame, **options: Any) -> str:
    """frame.to_csv(**options), every text cell, row label and column name neutralised (spreadsheet_safe), lines
    ending in CRLF as RFC 4180 says (so that a carriage return inside a cell is quoted: unquoted, a spreadsheet
    starts a new row there, and the rest of the cell is a new first cell)."""
    safe = frame.copy()
    for column in safe.columns:
        if not pd.api.types.is_numeric_dtype(safe[column]):
            safe[column] = safe[column].map(spreadsheet_safe)
    safe.index = pd.Index(safe.index.map(spreadsheet_safe), name=spreadsheet_safe(frame.index.name))
    safe.columns = safe.columns.map(spreadsheet_safe)
    return safe.to_csv(lineterminator="\r\n", **options)


def position_labels(pieces: list[str]) -> list[str]:
    """'position:token' with the token as figures show it: a table's row and column names, unique though tokens repeat."""
    return [f"{i}:{readable_label(p)}" for i, p in enumerate(pieces)]


def attention_csv(weights: np.ndarray, query_pieces: list[str], key_pieces: list[str]) -> str:
    """One map (Q, K) as CSV: a row per query, a column per key, labelled 'position:token' (as the figures show
    the token) so repeats stay apart."""
    frame = pd.DataFrame(
        np.asarray(weights),
        index=pd.Index(position_labels(query_pieces), name="query"),
        columns=position_labels(key_pieces),
    )
    return csv_text(frame, float_format="%.6g")
