"""CTranslate2's `model.bin` read as data, never by running CTranslate2 (docs/ctranslate2.md): its binary version,
its spec's name and revision, then each variable's name, shape, type and bytes, then the aliases (a name standing for
another variable, its quantization scale included).

The whole index is read and checked before any variable's bytes are: names and counts capped, every declared size
held to its shape and type and to what the file holds, so that a crafted header cannot make the reader allocate more
than the file stores. Weights are read one at a time and laid out in float32 (int8 and int16 divided by their scales,
float16 and bfloat16 widened); scalars (the spec's flags and counts) are read as numbers."""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import torch

from transformer.io.checkpoint import CheckpointError
from transformer.model.config import shown
from transformer.text.files import FileRefused, open_regular

NEWEST_BINARY_VERSION = 6  # what CTranslate2 4.x writes; versions 2 to 6 are read (1 has no spec name)
# Each type id's torch type and its bytes, in the order of CTranslate2's DataType enum (include/ctranslate2/types.h).
DTYPES = {
    0: (torch.float32, 4, "float32"),
    1: (torch.int8, 1, "int8"),
    2: (torch.int16, 2, "int16"),
    3: (torch.int32, 4, "int32"),
    4: (torch.float16, 2, "float16"),
    5: (torch.bfloat16, 2, "bfloat16"),
}
ITEM_SIZES = {4: 0, 2: 2, 1: 1}  # binary versions before 4 give a variable's item size, not its type
MAX_VARIABLES = 1 << 16  # NLLB-3.3B's spec has about 1,200
MAX_RANK = 4
MAX_NAME_BYTES = 512
CHUNK_BYTES = 16 << 20  # read at a time into a weight's float32 tensor


@dataclass(frozen=True)
class Variable:
    """One variable of the file: where its bytes are and what they hold."""

    shape: tuple[int, ...]
    type_id: int
    offset: int

    @property
    def dtype_name(self) -> str:
        return DTYPES[self.type_id][2]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class ModelBin:
    """The index of a `model.bin`: the spec, every variable by name (aliases resolved to the variable they name)."""

    path: Path
    spec: str
    revision: int
    version: int
    variables: dict[str, Variable]
    aliases: dict[str, str]

    def names(self) -> set[str]:
        return set(self.variables) | set(self.aliases)

    def find(self, name: str) -> Variable | None:
        """The variable under `name`, through an alias (a quantization scale follows its weight's alias)."""
        if name in self.variables:
            return self.variables[name]
        target = self.aliases.get(name) or (
            self.aliases.get(name.removesuffix("_scale"), "") + "_scale" if name.endswith("_scale") else None
        )
        return self.variables.get(target) if target else None

    def same(self, first: str, second: str) -> bool:
        """Whether two names are one stored variable (one an alias of the other)."""
        found = self.find(first)
        return found is not None and found is self.find(second)


class _Reader:
    """The file's fields in order, each refused in one line where the file ends first."""

    def __init__(self, file: BinaryIO, size: int, name: str):
        self.file, self.size, self.name = file, size, name

    def number(self, form: str) -> int:
        width = struct.calcsize(form)
        data = self.file.read(width)
        if len(data) < width:
            raise CheckpointError(f"{self.name} ends inside its index: truncated, not a whole CTranslate2 model")
        return struct.unpack("<" + form, data)[0]

    def text(self) -> str:
        length = self.number("H")
        if not 1 <= length <= MAX_NAME_BYTES:
            raise CheckpointError(f"{self.name} names a variable in {length} bytes: not a CTranslate2 model")
        data = self.file.read(length)
        if len(data) < length or data[-1] != 0:
            raise CheckpointError(f"{self.name} ends inside a name: truncated, not a whole CTranslate2 model")
        try:
            return data[:-1].decode()
        except UnicodeDecodeError:
            raise CheckpointError(f"{self.name} holds a name that is not UTF-8: not a CTranslate2 model") from None

    def skip(self, count: int, what: str) -> int:
        start = self.file.tell()
        if start + count > self.size:
            raise CheckpointError(
                f"{self.name} declares {shown(what, 80)} of {count:,} bytes past its end ({self.size:,} bytes): "
                "truncated or crafted, refused unread"
            )
        self.file.seek(count, os.SEEK_CUR)
        return start


def read_index(path: Path) -> ModelBin:
    """The index of the `model.bin` at `path`; CheckpointError naming what is wrong (nothing but the index read)."""
    try:
        with open_regular(path) as file:
            size = os.fstat(file.fileno()).st_size
            return _index(_Reader(file, size, path.name), path)
    except FileRefused as error:
        raise CheckpointError(str(error)) from None


def _index(reader: _Reader, path: Path) -> ModelBin:
    version = reader.number("I")
    if not 2 <= version <= NEWEST_BINARY_VERSION:
        raise CheckpointError(
            f"{reader.name} is of binary version {version}; versions 2 to {NEWEST_BINARY_VERSION} of CTranslate2's "
            "model.bin are read"
        )
    spec, revision = reader.text(), reader.number("I")
    count = reader.number("I")
    if count > MAX_VARIABLES:
        raise CheckpointError(f"{reader.name} declares {count:,} variables, more than {MAX_VARIABLES:,}: refused")
    variables = {}
    for _ in range(count):
        name = reader.text()
        rank = reader.number("B")
        if rank > MAX_RANK:
            raise CheckpointError(f"{reader.name}: {shown(name, 80)} has {rank} dimensions: not a model's variable")
        shape = tuple(reader.number("I") for _ in range(rank))
        type_id, stored = _type_and_bytes(reader, version)
        if type_id not in DTYPES:
            raise CheckpointError(f"{reader.name}: {shown(name, 80)} is of an unknown type ({type_id}): refused")
        expected = math.prod(shape) * DTYPES[type_id][1]
        if stored != expected:
            raise CheckpointError(
                f"{reader.name}: {shown(name, 80)} declares {stored:,} bytes for a {DTYPES[type_id][2]} of shape "
                f"{list(shape)} ({expected:,}): refused"
            )
        variables[name] = Variable(shape, type_id, reader.skip(stored, name))
    aliases = {}
    if version >= 3:
        count = reader.number("I")
        if count > MAX_VARIABLES:
            raise CheckpointError(f"{reader.name} declares {count:,} aliases, more than {MAX_VARIABLES:,}: refused")
        for _ in range(count):
            alias, target = reader.text(), reader.text()
            if target not in variables:
                raise CheckpointError(f"{reader.name}: the alias {shown(alias, 60)} names no variable: refused")
            aliases[alias] = target
    return ModelBin(path, spec, revision, version, variables, aliases)


def _type_and_bytes(reader: _Reader, version: int) -> tuple[int, int]:
    """A variable's type id and its size in bytes (binary versions before 4 give the item size and the count)."""
    if version >= 4:
        return reader.number("B"), reader.number("I")
    item_size = reader.number("B")
    return ITEM_SIZES.get(item_size, -1), reader.number("I") * item_size


def read_scalar(file: BinaryIO, index: ModelBin, name: str, default: float) -> float:
    """A scalar variable's value (a flag, a count, a scale), or `default` where the file has none."""
    found = index.find(name)
    if found is None:
        return default
    if found.numel != 1:
        raise CheckpointError(f"{index.path.name}: {shown(name, 80)} should be one number, has shape {found.shape}")
    return float(_read(file, found).reshape(-1)[0])


def read_weight(file: BinaryIO, index: ModelBin, name: str, transposed: bool = False) -> torch.Tensor:
    """A variable laid out in float32: an int8 or int16 one divided by its scale (`NAME_scale`: one per row, or
    one for the whole), a float16 or bfloat16 one widened. Read into the float32 tensor it becomes, CHUNK_BYTES of
    the file at a time: a 256k-row int8 embedding read whole, then widened, held its bytes twice beside its floats.
    `transposed`: a matrix laid out as its transpose (a view of it returned), as the model holds an output layer
    (model.linear.hold_transposed), so that it is never copied into that layout beside itself (NLLB-600M's tied
    embedding was: its peak 1.48x its float32 weights; docs/ctranslate2.md)."""
    found = index.find(name)
    if found is None:
        raise CheckpointError(f"{index.path.name} lacks the variable {shown(name, 80)}")
    kind, width, _ = DTYPES[found.type_id]
    divisor = None
    if kind in (torch.int8, torch.int16):
        scale = index.find(f"{name}_scale")
        if scale is None or scale.type_id != 0 or scale.numel not in (1, found.shape[0]):
            raise CheckpointError(f"{index.path.name}: {shown(name, 80)} is quantized without a scale that fits it")
        divisor = _read(file, scale).reshape(-1, *([1] * (len(found.shape) - 1)))
    transposed = transposed and len(found.shape) == 2
    laid_out = torch.empty(found.shape[::-1] if transposed else found.shape, dtype=torch.float32)
    if laid_out.numel() == 0:
        return laid_out.t() if transposed else laid_out
    rows = laid_out.t() if transposed else laid_out.reshape(len(laid_out) if laid_out.dim() else 1, -1)
    row_bytes = rows.shape[1] * width
    step = max(1, CHUNK_BYTES // row_bytes)
    file.seek(found.offset)
    for first in range(0, len(rows), step):
        chunk = rows[first : first + step]
        if kind == torch.float32 and not transposed:
            _read_into(file, chunk.numpy().data.cast("B"))
            continue
        data = bytearray(len(chunk) * row_bytes)
        _read_into(file, data)
        chunk.copy_(torch.frombuffer(data, dtype=kind).reshape(chunk.shape))
        if divisor is not None:
            part = divisor if len(divisor) == 1 else divisor[first : first + step]
            chunk.div_(part.reshape(-1, 1))
    return laid_out.t() if transposed else laid_out


def _read_into(file: BinaryIO, buffer: memoryview | bytearray) -> None:
    if file.readinto(buffer) != len(buffer):
        raise CheckpointError("the model.bin ends inside a variable: truncated")


def _read(file: BinaryIO, variable: Variable) -> torch.Tensor:
    kind, width, _ = DTYPES[variable.type_id]
    file.seek(variable.offset)
    data = bytearray(variable.numel * width)
    if not data:
        return torch.empty(variable.shape, dtype=kind)
    _read_into(file, data)
    return torch.frombuffer(data, dtype=kind).reshape(variable.shape)
