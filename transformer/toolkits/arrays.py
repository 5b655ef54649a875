"""A toolkit's NumPy archive (`.npz`, Marian's model file) read without running anything in it: each array by NumPy's
own reader with pickles refused, after its header is read and its size held to what the archive stores, so that a
crafted header cannot make the reader allocate more than the file holds; and what the archive unpacks to held to the
memory free before any of it is read (a compressed member may unpack to far more than the file's size)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np

from transformer.io.checkpoint import CheckpointError, CheckpointTooLarge, file_limit
from transformer.io.memory import memory_available
from transformer.text.files import FileRefused, open_regular

HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of an `.npz` archive by name; CheckpointError for a file that is not one, holds pickled objects,
    declares arrays larger than it stores, or would not fit in the memory free now."""
    try:
        with open_regular(path) as file:  # a pipe or a device is refused before anything reads it
            size = file.seek(0, 2)
            limit = file_limit(memory_available())
            if size > limit:
                raise CheckpointTooLarge(
                    f"{path.name} is {size / 1e9:.2f} GB; {limit / 1e9:.2f} GB opens now: not opened"
                )
            with zipfile.ZipFile(file) as archive:
                members = archive.infolist()
                unpacked = sum(info.file_size for info in members)  # what the arrays will hold: a compressed
                if unpacked > limit:  # member may unpack to far more than the file's size
                    raise CheckpointTooLarge(
                        f"{path.name} unpacks to {unpacked / 1e9:.2f} GB; {limit / 1e9:.2f} GB opens now: not opened"
                    )
                return {_array_name(info): _read_member(archive, info) for info in members}
    except CheckpointError:
        raise  # too large: said as it is (a ValueError too, which the clause below would misname)
    except (OSError, FileRefused) as error:
        raise CheckpointError(f"{path.name} cannot be read: {str(error)[:200]}") from None
    except (zipfile.BadZipFile, ValueError, EOFError, NotImplementedError) as error:
        raise CheckpointError(
            f"{path.name} is not a NumPy archive (.npz) that can be read: {str(error)[:200]}"
        ) from None


def _array_name(info: zipfile.ZipInfo) -> str:
    if not info.filename.endswith(".npy"):
        raise ValueError(f"{info.filename[:80]!r} is not an array (.npy)")
    return info.filename.removesuffix(".npy")


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One array, its declared shape and type checked against the bytes the archive holds for it before any is read."""
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in HEADER_READERS:
            raise ValueError(f"{info.filename[:80]}: array format version {version} is not read")
        shape, _, dtype = HEADER_READERS[version](member)
        if dtype.hasobject:
            raise ValueError(f"{info.filename[:80]} holds Python objects (a pickle): refused unread")
        if dtype.itemsize * int(np.prod(shape, dtype=object)) > info.file_size:
            raise ValueError(f"{info.filename[:80]} declares more data than the archive holds for it")
    with archive.open(info) as member:
        return np.lib.format.read_array(member, allow_pickle=False)
