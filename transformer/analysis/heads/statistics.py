"""What each head does, in numbers: statistics of its attention, divergence between two models, parameters.

Statistics take maps shaped (L, H, Q, K) (rows are probability distributions) and return
one row per layer and head, so a table or a layers x heads heatmap can show them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import numpy as np

from transformer.analysis.views import attention_view
from transformer.decoding.greedy import decode_with_chooser
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import TokenizerBase

if TYPE_CHECKING:  # pandas is slow to import (docs/performance.md): only the tables below need it, not the first page
    import pandas as pd

STATISTICS = {
    "entropy": "entropy of the weights (nats; 0 = one key, log K = uniform)",
    "previous": "share of weight on the previous position",
    "same": "share of weight on the same position",
    "next": "share of weight on the next position",
    "special": "share of weight on <s> or </s>",
    "distance": "mean distance |query - key| in positions",
}
SPECIAL_PIECES = ("<s>", "</s>")
SHARES = ("previous", "same", "next", "special")  # shares of a row's weight: 0 to 1


def statistic_ranges(keys: int, *tables: dict[str, np.ndarray] | None) -> dict[str, tuple[float, float]]:
    """One colour range per statistic, the same for every map drawn of it (the sentence's and the corpus's).

    Shares run from 0 to 1; entropy from 0 to log K (uniform over the sentence's K keys) or past it where a
    corpus average reaches higher; distance from 0 to the largest value shown. None of them is ever negative.
    """
    shown = [table for table in tables if table is not None]

    def largest(name: str) -> float:
        return max(float(np.nanmax(table[name])) for table in shown) if shown else 0.0

    ranges = {name: (0.0, 1.0) for name in SHARES}
    ranges["entropy"] = (0.0, max(float(np.log(max(keys, 2))), largest("entropy")))
    ranges["distance"] = (0.0, max(largest("distance"), 1.0))
    return ranges


def _offset_share(maps: np.ndarray, offset: int) -> np.ndarray:
    """Mean over queries q of the weight on key q + offset (0 where that key does not exist)."""
    queries, keys = maps.shape[-2:]
    rows = np.arange(queries)
    columns = rows + offset
    valid = (columns >= 0) & (columns < keys)
    picked = maps[..., rows[valid], columns[valid]]
    return picked.sum(axis=-1) / queries


def row_entropy(maps: np.ndarray) -> np.ndarray:
    """(..., Q, K) -> (...): the entropy of each row (nats), averaged over the rows; zero weights add nothing."""
    maps = np.asarray(maps, dtype=np.float64)
    return -(maps * np.log(np.where(maps > 0, maps, 1.0))).sum(-1).mean(-1)


def head_statistics(maps: np.ndarray, key_pieces: list[str]) -> dict[str, np.ndarray]:
    """Each statistic as an (L, H) array, averaged over the query rows."""
    maps = np.asarray(maps, dtype=np.float64)
    queries, keys = maps.shape[-2:]
    distance = np.abs(np.arange(queries)[:, None] - np.arange(keys)[None, :])
    special = np.array([piece in SPECIAL_PIECES for piece in key_pieces], dtype=bool)
    return {
        "entropy": row_entropy(maps),
        "previous": _offset_share(maps, -1),
        "same": _offset_share(maps, 0),
        "next": _offset_share(maps, 1),
        "special": maps[..., special].sum(-1).mean(-1),
        "distance": (maps * distance).sum(-1).mean(-1),
    }


def statistics_frame(statistics: dict[str, np.ndarray]) -> pd.DataFrame:
    """(L, H) arrays -> a table with a row per head, layers and heads numbered from 1."""
    import pandas as pd

    layers, heads = next(iter(statistics.values())).shape
    index = pd.MultiIndex.from_product([range(1, layers + 1), range(1, heads + 1)], names=["layer", "head"])
    return pd.DataFrame({name: values.reshape(-1) for name, values in statistics.items()}, index=index)


def corpus_statistics(
    model: Transformer,
    tokenizer: TokenizerBase,
    sentences: Iterable[str],
    kind: str,
    progress: Callable[[int], None] | None = None,
) -> dict[str, np.ndarray]:
    """The statistics of one attention kind averaged over sentences (each decoded greedily)."""
    totals: dict[str, np.ndarray] = {}
    count = 0
    for index, sentence in enumerate(sentences):
        if not sentence.strip():
            continue
        view = attention_view(decode_with_chooser(model, tokenizer, sentence), kind)
        for name, values in head_statistics(view.maps, view.key_pieces).items():
            totals[name] = totals.get(name, 0) + values
        count += 1
        if progress:
            progress(index + 1)
    if not count:
        raise ValueError("no non-empty sentence to average over")
    return {name: values / count for name, values in totals.items()}


def js_divergence(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Jensen-Shannon divergence (nats, 0..log 2) between matching rows, averaged over rows: (L, H, Q, K) -> (L, H)."""
    p, q = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    middle = (p + q) / 2

    def kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(a > 0, a * np.log(np.where(a > 0, a, 1) / np.where(b > 0, b, 1)), 0).sum(-1)

    return ((kl(p, middle) + kl(q, middle)) / 2).mean(-1)


def parameter_counts(model: Transformer) -> pd.DataFrame:
    """Parameters by component (tied weights counted once, under embeddings)."""
    import pandas as pd

    seen: set[int] = set()
    counts: dict[str, int] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in seen:
            continue
        seen.add(id(parameter))
        component = name.split(".")[0]
        if component in ("encoder_layers", "decoder_layers"):
            component = f"{component.split('_')[0]} {name.split('.')[2]}"  # e.g. "encoder self_attn"
        counts[component] = counts.get(component, 0) + parameter.numel()
    frame = pd.DataFrame({"parameters": counts}).sort_values("parameters", ascending=False)
    frame["share"] = frame["parameters"] / frame["parameters"].sum()
    return frame
