"""Files read from disk, each bounded before it is read (regular files only, at most what is used), and text files
of one sentence a line: plain, gzipped or xz-compressed, read whole, as a stream or as a parallel pair."""

from __future__ import annotations

import gzip
import io
import itertools
import lzma
import os
import stat
import zlib
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import BinaryIO

# A line longer than a paragraph is no sentence, and one is encoded at a cost of seconds and gigabytes before it can
# be skipped (measured: docs/performance.md).
MAX_LINE_BYTES = 20_000


TEXT_FILE = "text file, one sentence a line"


class FileRefused(ValueError):
    """A file that is not read: not a regular file (a device, a pipe, a directory), missing, or over its limit."""

    def __init__(self, path: str | Path, reason: str, over_limit: bool = False):
        super().__init__(f"{path} {reason}")
        self.reason = reason  # what is wrong, for a message that names the file its own way
        self.over_limit = over_limit


@contextmanager
def open_regular(path: str | Path, kind: str = "file") -> Iterator[io.BufferedReader]:
    """A regular file opened for reading; FileRefused naming it for anything else. Opened without blocking and
    checked once open, so a pipe (or one swapped in after a check) cannot hang the reader and a link to /dev/zero
    is refused unread."""
    path = Path(path)
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise FileRefused(path, f"cannot be read ({error.strerror or error.__class__.__name__})") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        if stat.S_ISDIR(mode):
            raise FileRefused(path, f"is a directory: give a {kind}")
        raise FileRefused(path, "is not a regular file (a device, a pipe or a socket): refused")
    with os.fdopen(descriptor, "rb") as handle:
        yield handle


def read_regular(path: str | Path, limit: int) -> bytes:
    """A regular file's bytes, refused (FileRefused) past `limit` bytes without reading them. What is asked of the
    reader is what the file holds (one byte more, to see it did not grow), never the limit: Python reserves a read's
    whole buffer first, so a limit of half the machine's memory failed under any address-space cap."""
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        data = handle.read(size + 1) if size <= limit else b""
    if size > limit:
        raise FileRefused(path, f"is {size:,} bytes, over the limit of {limit:,}", over_limit=True)
    if len(data) != size:
        raise FileRefused(path, f"changed while it was read ({size:,} bytes, then {len(data):,}): read it again")
    return data


def read_head(path: str | Path, size: int) -> bytes:
    """At most the first `size` bytes of a regular file (FileRefused for anything else): what a reader shows."""
    with open_regular(path) as handle:
        return handle.read(size)


def read_lines(path: str | Path, max_line_bytes: int = MAX_LINE_BYTES) -> list[str]:
    """One sentence a line, read as a stream; `.gz` and `.xz` files are decompressed. ValueError naming the file if
    it is not text, not a regular file, or has a line over max_line_bytes."""
    with open_regular(path, TEXT_FILE) as handle:
        try:
            return text_lines(handle, max_line_bytes=max_line_bytes)
        except ValueError as error:
            raise ValueError(f"{path}: {error}") from None


def text_lines(
    data: bytes | BinaryIO,
    max_bytes: int | None = None,
    max_lines: int | None = None,
    max_line_bytes: int | None = None,
) -> list[str]:
    """The lines of UTF-8 text, gzipped, xz-compressed or plain, read as a stream: at most max_lines of them (the rest
    never decompressed), each at most max_line_bytes, max_bytes in all after decompression. ValueError naming the
    first line that is not text or is too long.

    What an upload costs is then what is kept, however small the file (measured: docs/performance.md).
    """
    with closing(iter_text_lines(data, max_bytes, max_line_bytes)) as lines:
        return list(itertools.islice(lines, max_lines))


def iter_text_lines(
    data: bytes | BinaryIO, max_bytes: int | None = None, max_line_bytes: int | None = None
) -> Iterator[str]:
    """text_lines' lines one at a time, decompressed a block ahead of the reader: a reader that stops early (a
    treebank's first sentences) never holds, or decompresses, the rest."""
    pending, left, count = b"", max_bytes, 0
    with _decompressing(data) as stream:
        while True:
            block = stream.read(READ_BLOCK if left is None else min(READ_BLOCK, left + 1))
            if left is not None and (left := left - len(block)) < 0:
                raise _over_the_limit(max_bytes)
            if not block:
                break
            *complete, pending = (pending + block).split(b"\n")
            _check_lengths(complete, pending, max_line_bytes, count)
            decoded = _decoded(complete, count)
            count += len(decoded)
            yield from decoded
    if pending:  # the last line, without a newline after it
        yield from _decoded([pending], count)


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


def _opened(data: bytes | BinaryIO) -> BinaryIO:
    """A stream of the file's bytes, decompressed as it is read if gzip or xz (recognised by their magic bytes)."""
    raw = io.BytesIO(data) if isinstance(data, bytes) else data
    raw = raw if hasattr(raw, "peek") else io.BufferedReader(raw)
    magic = raw.peek(6)[:6]
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


@contextmanager
def _decompressing(data: bytes | BinaryIO) -> Iterator[BinaryIO]:
    """The stream of _opened(data), closed after; a corrupt gzip or xz stream is a ValueError that names it."""
    stream = _opened(data)
    try:
        with stream:
            yield stream
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as error:
        raise ValueError(f"a corrupt {_compression(stream)} file: {error}") from None


def _compression(stream: BinaryIO) -> str:
    return "gzip" if isinstance(stream, gzip.GzipFile) else "xz" if isinstance(stream, lzma.LZMAFile) else "plain"


def _not_text(number: int, line: bytes, error: UnicodeDecodeError) -> str:
    return f"line {number} is not UTF-8 text (byte 0x{line[error.start]:02x} at byte {error.start + 1} of the line)"


def _over_the_limit(max_bytes: int) -> ValueError:
    return ValueError(f"the text is over the limit of {max_bytes / 2**20:g} MB (after decompression)")


def decoded_lines(data: bytes | io.BufferedReader, max_line_bytes: int = MAX_LINE_BYTES) -> tuple[list[str], list[str]]:
    """Each line of UTF-8 text, read as a stream (decompressed if gzip or xz): "" where a line is not UTF-8 or is
    longer than max_line_bytes, and a message naming each such line.

    One bad line costs its own line only: the lines around it are kept, and a long one is never held whole.
    """
    lines: list[str] = []
    problems: list[str] = []
    with _decompressing(data) as stream:
        for number in itertools.count(1):
            raw = stream.readline(max_line_bytes + 1)
            if not raw:
                break
            if not raw.endswith(b"\n") and len(raw) > max_line_bytes:
                while raw and not raw.endswith(b"\n"):  # the rest of the line, a block at a time
                    raw = stream.readline(READ_BLOCK)
                lines.append("")
                problems.append(f"line {number} is longer than {max_line_bytes:,} bytes: not a sentence")
                continue
            try:
                lines.append(raw.removesuffix(b"\n").decode("utf-8"))
            except UnicodeDecodeError as error:
                lines.append("")
                problems.append(_not_text(number, raw, error))
    return lines, problems


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> tuple[list[str], list[str]]:
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise ValueError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not a parallel pair")
    return src, tgt
