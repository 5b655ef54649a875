"""A toolkit's NumPy archive (`.npz`, Marian's model file) read without running anything in it: each array by NumPy's
own reader with pickles refused, after its header is read and its size held to what the archive stores, so that a
crafted header cannot make the reader allocate more than the file holds; what the archive unpacks to held to the
memory free before any of it is read (a compressed member may unpack to far more than the file's size); and every
array's name and shape offered to the reader's own check (`NpzArchive.headers`) before any array is read, so that
9 MB unpacking to 2 GB under a name no model has is refused having read nothing."""

from __future__ import annotations

import contextlib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from transformer.io.checkpoint import CheckpointError, CheckpointTooLarge, file_limit
from transformer.io.memory import memory_available
from transformer.text.files import FileRefused, open_regular

HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


class NpzArchive:
    """An open `.npz`: each array's declared shape and type (`headers`), read and checked against what the archive
    stores for it; arrays read by name only when asked for."""

    def __init__(self, name: str, archive: zipfile.ZipFile):
        self.name = name
        self._archive = archive
        self._members = {_array_name(info): info for info in archive.infolist()}
        self.headers = {name: _header(archive, info) for name, info in self._members.items()}

    def read(self, name: str) -> np.ndarray:
        """One array; CheckpointError where it cannot be read."""
        with _said_as_refusals(self.name):
            with self._archive.open(self._members[name]) as member:
                return np.lib.format.read_array(member, allow_pickle=False)

    def read_all(self) -> dict[str, np.ndarray]:
        return {name: self.read(name) for name in self._members}


@contextlib.contextmanager
def open_npz(path: Path) -> Iterator[NpzArchive]:
    """The archive at `path`, open while the block runs; CheckpointError for a file that is not one, holds pickled
    objects, declares arrays larger than it stores, or would not fit in the memory free now."""
    with contextlib.ExitStack() as opened_files:
        with _said_as_refusals(path.name):
            file = opened_files.enter_context(open_regular(path))  # a pipe or a device is refused before it is read
            size = file.seek(0, 2)
            limit = file_limit(memory_available())
            if size > limit:
                raise CheckpointTooLarge(
                    f"{path.name} is {size / 1e9:.2f} GB; {limit / 1e9:.2f} GB opens now: not opened"
                )
            archive = opened_files.enter_context(zipfile.ZipFile(file))
            unpacked = sum(info.file_size for info in archive.infolist())  # what the arrays will hold: a compressed
            if unpacked > limit:  # member may unpack to far more than the file's size
                raise CheckpointTooLarge(
                    f"{path.name} unpacks to {unpacked / 1e9:.2f} GB; {limit / 1e9:.2f} GB opens now: not opened"
                )
            opened = NpzArchive(path.name, archive)
        yield opened  # what the block raises is its own: not said as the archive's


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an `.npz` archive by name (open_npz's refusals)."""
    with open_npz(path) as archive:
        return archive.read_all()


@contextlib.contextmanager
def _said_as_refusals(name: str) -> Iterator[None]:
    """What reading the archive raises, said as a CheckpointError naming the file (a refusal already one, such as
    too large, said as it is: a ValueError too, which the clause below would misname)."""
    try:
        yield
    except CheckpointError:
        raise
    except (OSError, FileRefused) as error:
        raise CheckpointError(f"{name} cannot be read: {str(error)[:200]}") from None
    except (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError) as error:
        raise CheckpointError(f"{name} is not a NumPy archive (.npz) that can be read: {str(error)[:200]}") from None


def _array_name(info: zipfile.ZipInfo) -> str:
    if not info.filename.endswith(".npy"):
        raise ValueError(f"{info.filename[:80]!r} is not an array (.npy)")
    return info.filename.removesuffix(".npy")


def _header(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
    """One array's declared shape and type, checked against the bytes the archive holds for it: only the header's
    first bytes are unpacked."""
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in HEADER_READERS:
            raise ValueError(f"{info.filename[:80]}: array format version {version} is not read")
        shape, _, dtype = HEADER_READERS[version](member)
    if dtype.hasobject:
        raise ValueError(f"{info.filename[:80]} holds Python objects (a pickle): refused unread")
    if dtype.itemsize * int(np.prod(shape, dtype=object)) > info.file_size:
        raise ValueError(f"{info.filename[:80]} declares more data than the archive holds for it")
    return tuple(shape), dtype
