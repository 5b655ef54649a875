"""Text files, one sentence a line: plain, gzipped or xz-compressed, read whole or as a parallel pair."""

from __future__ import annotations

import gzip
import io
import lzma
import zlib
from pathlib import Path
from typing import AnyStr


def read_lines(path: str | Path) -> list[str]:
    """One sentence a line; `.gz` files are decompressed. ValueError naming the file if it is not text."""
    try:
        return text_lines(file_bytes(path))
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def file_bytes(path: str | Path) -> bytes:
    """A text file's bytes; a directory is refused with a message rather than IsADirectoryError."""
    if Path(path).is_dir():
        raise ValueError(f"{path} is a directory: give a text file, one sentence a line")
    return Path(path).read_bytes()


def text_lines(data: bytes, max_bytes: int | None = None) -> list[str]:
    """The lines of UTF-8 text, gzipped or not; ValueError naming the first line that is not text."""
    lines, problems = decoded_lines(decompressed(data, max_bytes))
    if problems:
        raise ValueError(f"{problems[0]}: expected one sentence a line")
    return lines


def decompressed(data: bytes, max_bytes: int | None = None) -> bytes:
    """The bytes of a file, decompressed if gzip or xz (recognised by their magic bytes), refused past max_bytes.

    A compressed stream is decompressed only up to max_bytes (a small file can expand a thousandfold).
    """
    opener = {b"\x1f\x8b": lambda raw: gzip.GzipFile(fileobj=raw), b"\xfd7zXZ\x00": lzma.LZMAFile}
    kind = next((magic for magic in opener if data.startswith(magic)), None)
    if kind is not None:
        try:
            with opener[kind](io.BytesIO(data)) as stream:
                data = stream.read(-1 if max_bytes is None else max_bytes + 1)
        except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
            raise ValueError(f"a corrupt {'gzip' if kind[0] == 0x1F else 'xz'} file: {error}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"the text is over the limit of {max_bytes / 2**20:g} MB (after decompression)")
    return data


def decoded_lines(data: bytes) -> tuple[list[str], list[str]]:
    """Each line of UTF-8 text, "" where a line is not UTF-8, and a message naming each such line.

    One bad byte costs its own line only: the lines around it are kept.
    """
    try:
        return _split(data.decode("utf-8")), []
    except UnicodeDecodeError:
        pass
    lines, problems = [], []
    for number, raw in enumerate(_split(data), 1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            lines.append("")
            problems.append(
                f"line {number} is not UTF-8 text (byte 0x{raw[error.start]:02x} at byte {error.start + 1} of the line)"
            )
    return lines, problems


def _split(text: AnyStr) -> list[AnyStr]:
    """Lines without their newlines; not splitlines(): U+2028 and friends stay inside a sentence."""
    lines = text.split("\n" if isinstance(text, str) else b"\n")
    return lines[:-1] if lines and not lines[-1] else lines


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not a parallel pair")
    return src, tgt
