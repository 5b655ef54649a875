"""Text files, one sentence a line: plain, gzipped or xz-compressed, read whole or as a parallel pair."""

from __future__ import annotations

import gzip
import io
import lzma
import zlib
from pathlib import Path
from typing import AnyStr, BinaryIO


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


def text_lines(
    data: bytes, max_bytes: int | None = None, max_lines: int | None = None, max_line_bytes: int | None = None
) -> list[str]:
    """The lines of UTF-8 text, gzipped, xz-compressed or plain, read as a stream: at most max_lines of them (the rest
    never decompressed), each at most max_line_bytes, max_bytes in all after decompression. ValueError naming the
    first line that is not text or is too long.

    What an upload costs is then what is kept: a 200 KB gzip of 70 million short lines held 5.5 GB as a list.
    """
    lines: list[str] = []
    pending, left = b"", max_bytes
    try:
        with _opened(data) as stream:
            while max_lines is None or len(lines) < max_lines:
                block = stream.read(READ_BLOCK if left is None else min(READ_BLOCK, left + 1))
                if left is not None and (left := left - len(block)) < 0:
                    raise _over_the_limit(max_bytes)
                if not block:
                    break
                *complete, pending = (pending + block).split(b"\n")
                _check_lengths(complete, pending, max_line_bytes, len(lines))
                lines += _decoded(complete, len(lines))
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        raise ValueError(f"a corrupt {_compression(data)} file: {error}") from None
    if pending:  # the last line, without a newline after it
        lines += _decoded([pending], len(lines))
    return lines[:max_lines]


READ_BLOCK = 1 << 18  # bytes decompressed at a time: what reading more lines than are kept can cost


def _check_lengths(complete: list[bytes], pending: bytes, max_line_bytes: int | None, before: int) -> None:
    if max_line_bytes is None or max(map(len, [*complete, pending])) <= max_line_bytes:
        return
    number = before + 1 + next((i for i, line in enumerate(complete) if len(line) > max_line_bytes), len(complete))
    raise ValueError(f"line {number} is longer than {max_line_bytes:,} bytes: expected one sentence a line")


def _decoded(lines: list[bytes], before: int) -> list[str]:
    """Lines of UTF-8 text, decoded together; ValueError naming the first that is not text."""
    if not lines:
        return []
    try:
        return b"\n".join(lines).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        for number, line in enumerate(lines, before + 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{_not_text(number, line, error)}: expected one sentence a line") from None
        raise


def _opened(data: bytes) -> BinaryIO:
    """A stream of the file's bytes, decompressed as it is read if gzip or xz (recognised by their magic bytes)."""
    raw = io.BytesIO(data)
    if data.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw)
    if data.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


def _not_text(number: int, line: bytes, error: UnicodeDecodeError) -> str:
    return f"line {number} is not UTF-8 text (byte 0x{line[error.start]:02x} at byte {error.start + 1} of the line)"


def decompressed(data: bytes, max_bytes: int | None = None) -> bytes:
    """The bytes of a file, decompressed if gzip or xz, refused past max_bytes.

    A compressed stream is decompressed only up to max_bytes (a small file can expand a thousandfold).
    """
    try:
        with _opened(data) as stream:
            data = stream.read(-1 if max_bytes is None else max_bytes + 1)
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        raise ValueError(f"a corrupt {_compression(data)} file: {error}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise _over_the_limit(max_bytes)
    return data


def _over_the_limit(max_bytes: int) -> ValueError:
    return ValueError(f"the text is over the limit of {max_bytes / 2**20:g} MB (after decompression)")


def _compression(data: bytes) -> str:
    return "gzip" if data.startswith(b"\x1f\x8b") else "xz"


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
            problems.append(_not_text(number, raw, error))
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
