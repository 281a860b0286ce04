"""A schema-blind reader of Java ``DataInput`` bytes: big-endian, modified UTF-8, length-prefixed.

It tracks the absolute offset of every read so errors can say where a file went wrong, and it
never trusts a length prefix: a length beyond what the stream still holds, or beyond a sane
bound, is a ``FormatError`` before anything is allocated.
"""

from __future__ import annotations

import io
import struct
from typing import TYPE_CHECKING, BinaryIO

from statecat.statemeta.errors import FormatError, UnsupportedError

if TYPE_CHECKING:
    from statecat.statemeta.files.storage import StateFile

_I8 = struct.Struct(">b")
_U8 = struct.Struct(">B")
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_F32 = struct.Struct(">f")
_F64 = struct.Struct(">d")

# Largest length prefix accepted for an in-memory byte array read through this class (names,
# snapshot payloads, framed blocks). State data never goes through here in bulk.
MAX_FRAMED_BYTES = 256 * 1024 * 1024

# What to do when the bytes end before what they announce (a cut-short copy is the usual cause).
TRUNCATED_HINT = "Copy the file again from where the snapshot was taken; if it is whole, it is damaged"


class DataInput:
    """Reads Java DataOutput encodings from a binary stream, counting offsets from ``base``."""

    __slots__ = ("_stream", "name", "_pos", "_end")

    def __init__(self, stream: BinaryIO | StateFile, name: str, *, base: int = 0, length: int | None = None) -> None:
        self._stream = stream
        self.name = name
        self._pos = base
        self._end = None if length is None else base + length

    @classmethod
    def of_bytes(cls, data: bytes, name: str, *, base: int = 0) -> DataInput:
        return cls(io.BytesIO(data), name, base=base, length=len(data))

    @property
    def offset(self) -> int:
        """Absolute offset (in the file named by ``name``) of the next byte to be read."""
        return self._pos

    @property
    def remaining(self) -> int | None:
        return None if self._end is None else self._end - self._pos

    def error(
        self, expected: str, got: object = None, *, offset: int | None = None, hint: str | None = None
    ) -> FormatError:
        message = f"expected {expected}" if got is None else f"expected {expected}, got {got}"
        return FormatError(message, file=self.name, offset=self._pos if offset is None else offset, hint=hint)

    def truncated(self, expected: str, got: object, *, offset: int | None = None) -> FormatError:
        """A read or a length prefix past the end: the bytes were cut short, or a length is garbled."""
        return FormatError(
            f"truncated or corrupt: expected {expected}, got {got}",
            file=self.name,
            offset=self._pos if offset is None else offset,
            hint=TRUNCATED_HINT,
        )

    def read(self, n: int) -> bytes:
        if n < 0:
            raise self.error("a non-negative length", n)
        if self._end is not None and self._pos + n > self._end:
            raise self.truncated(f"{n} more bytes", f"only {self._end - self._pos} before the end")
        data = self._stream.read(n)
        if len(data) != n:
            raise FormatError(
                f"truncated: expected {n} more bytes, got the end of the file after {len(data)}",
                file=self.name,
                offset=self._pos,
                hint=TRUNCATED_HINT,
            )
        self._pos += n
        return data

    def skip(self, n: int) -> None:
        if n < 0:
            raise self.error("a non-negative length", n)
        if self._end is not None and self._pos + n > self._end:
            raise self.truncated(f"{n} more bytes", f"only {self._end - self._pos} before the end")
        if self._stream.seekable():
            self._stream.seek(n, io.SEEK_CUR)
            self._pos += n
        else:
            while n:
                chunk = self.read(min(n, 1 << 20))
                n -= len(chunk)

    def at_end(self) -> bool:
        if self._end is not None:
            return self._pos >= self._end
        peek = getattr(self._stream, "peek", None)
        if peek is not None:
            return not peek(1)
        here = self._stream.tell()
        more = self._stream.read(1)
        self._stream.seek(here)
        return not more

    def read_i8(self) -> int:
        return _I8.unpack(self.read(1))[0]

    def read_u8(self) -> int:
        return _U8.unpack(self.read(1))[0]

    def read_bool(self) -> bool:
        return self.read(1) != b"\x00"

    def read_i16(self) -> int:
        return _I16.unpack(self.read(2))[0]

    def read_u16(self) -> int:
        return _U16.unpack(self.read(2))[0]

    def read_i32(self) -> int:
        return _I32.unpack(self.read(4))[0]

    def read_i64(self) -> int:
        return _I64.unpack(self.read(8))[0]

    def read_f32(self) -> float:
        return _F32.unpack(self.read(4))[0]

    def read_f64(self) -> float:
        return _F64.unpack(self.read(8))[0]

    def read_length(self, what: str, *, limit: int = MAX_FRAMED_BYTES) -> int:
        """An i32 count or byte length that must be >= 0 and within ``limit`` and the stream."""
        at = self._pos
        n = self.read_i32()
        if n < 0 or n > limit:
            raise self.error(f"{what} between 0 and {limit}", n, offset=at)
        if self._end is not None and n > self._end - self._pos and what.endswith("bytes"):
            raise self.truncated(f"{what} within the {self._end - self._pos} bytes left", n, offset=at)
        return n

    def read_framed_bytes(self, what: str = "length of byte array") -> bytes:
        return self.read(self.read_length(what + " in bytes"))

    def read_utf(self) -> str:
        """Java ``writeUTF``: u16 byte length, then modified UTF-8."""
        at = self._pos
        raw = self.read(self.read_u16())
        return decode_modified_utf8(raw, self.name, at)


def decode_modified_utf8(raw: bytes, file: str, offset: int) -> str:
    """Modified UTF-8 differs from UTF-8 in NUL (C0 80) and supplementary characters (surrogate pairs)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    try:
        # Surrogates come out as lone surrogate code points; re-pair them through UTF-16.
        text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
        return text.encode("utf-16", "surrogatepass").decode("utf-16")
    except UnicodeError as exc:
        raise FormatError(
            f"expected a modified UTF-8 string, got undecodable bytes {raw[:32]!r}", file=file, offset=offset
        ) from exc


def encode_modified_utf8(text: str) -> bytes:
    """The inverse of ``decode_modified_utf8``: Java's modified UTF-8 of the UTF-16 code units
    (U+0000 as C0 80, each surrogate of a pair as its own three-byte sequence)."""
    if text.isascii() and "\x00" not in text:
        return text.encode("ascii")
    encoded = bytearray()
    for (unit,) in struct.iter_unpack(">H", text.encode("utf-16-be", "surrogatepass")):
        if 0 < unit < 0x80:
            encoded.append(unit)
        elif unit < 0x800:
            encoded += bytes((0xC0 | unit >> 6, 0x80 | unit & 0x3F))
        else:
            encoded += bytes((0xE0 | unit >> 12, 0x80 | unit >> 6 & 0x3F, 0x80 | unit & 0x3F))
    return bytes(encoded)


# Java's writeUTF prefixes the byte length as an unsigned 16-bit number.
MAX_UTF_BYTES = 0xFFFF


class DataOutput:
    """Writes Java DataOutput encodings into a growing buffer: the inverse of ``DataInput``."""

    __slots__ = ("buffer",)

    def __init__(self) -> None:
        self.buffer = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.buffer)

    def __len__(self) -> int:
        return len(self.buffer)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.buffer += data

    def write_u8(self, value: int) -> None:
        self.buffer += _U8.pack(value)

    def write_bool(self, value: bool) -> None:
        self.buffer += _U8.pack(1 if value else 0)

    def write_i16(self, value: int) -> None:
        self.buffer += _I16.pack(value)

    def write_u16(self, value: int) -> None:
        self.buffer += _U16.pack(value)

    def write_i32(self, value: int) -> None:
        self.buffer += _I32.pack(value)

    def write_i64(self, value: int) -> None:
        self.buffer += _I64.pack(value)

    def write_utf(self, text: str) -> None:
        raw = encode_modified_utf8(text)
        if len(raw) > MAX_UTF_BYTES:
            raise UnsupportedError(
                f"expected a string of at most {MAX_UTF_BYTES} modified UTF-8 bytes, got {len(raw)}: {text[:40]!r}…"
            )
        self.buffer += _U16.pack(len(raw))
        self.buffer += raw
