"""Text files, one sentence a line: plain or gzipped, read whole or as a parallel pair."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path


def read_lines(path: str | Path) -> list[str]:
    """One sentence a line; `.gz` files are decompressed."""
    return text_lines(Path(path).read_bytes())


def text_lines(data: bytes, max_bytes: int | None = None) -> list[str]:
    """The lines of UTF-8 text, gzipped or not (recognised by its magic bytes); ValueError if not text.

    A gzip stream is decompressed only up to max_bytes (a small file can expand a thousandfold).
    """
    if data[:2] == b"\x1f\x8b":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
                data = stream.read(-1 if max_bytes is None else max_bytes + 1)
        except (OSError, EOFError, zlib.error) as error:
            raise ValueError(f"a corrupt gzip file: {error}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"the text is over the limit of {max_bytes / 2**20:g} MB (after decompression)")
    try:
        lines = data.decode("utf-8").split("\n")  # not splitlines(): U+2028 and friends stay inside a sentence
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text: expected one sentence a line") from None
    return lines[:-1] if lines and lines[-1] == "" else lines


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not a parallel pair")
    return src, tgt
