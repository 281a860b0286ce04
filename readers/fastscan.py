"""Column-wise decoding of keyed state for the common layouts, at compiled speed.

The key-group framing (length-prefixed key and value per entry, flags between state runs) is a
sequential walk, so it runs compiled (numba). What it yields — each entry's key and value position
— lets fixed-width fields be gathered column-wise with numpy and strings be cut into Arrow buffers
without a Python object per row. States whose types are outside this plan use the general
per-record decoders in ``scan.py``; both give the same rows (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import pyarrow as pa

from statecat.readers.arrow_types import arrow_type
from statecat.statemeta.types import TypeDescriptor, key_column_type

END_OF_KEY_GROUP = 0xFFFF
FLAG = 0x80
# Error codes of the compiled walk, turned into messages by the caller.
WALK_OK, WALK_OVERRUN, WALK_WRONG_GROUP = 0, 1, 2
WALK_ERRORS = {WALK_OVERRUN: "expected entry lengths within the key-group, got a length running past its end",
               WALK_WRONG_GROUP: "expected entries of this key-group only, got an entry of another key-group"}
MIN_ENTRY_BYTES = 9  # i32 key length, 1 key byte, i32 value length

# SQL logical types stored in one 8-byte slot of a binary row, with their numpy dtype.
SLOT_DTYPES = {
    "BOOLEAN": np.dtype("?"), "TINYINT": np.dtype("<i1"), "SMALLINT": np.dtype("<i2"), "INTEGER": np.dtype("<i4"),
    "DATE": np.dtype("<i4"), "BIGINT": np.dtype("<i8"), "FLOAT": np.dtype("<f4"), "DOUBLE": np.dtype("<f8"),
}
JAVA_DTYPES = {"long": np.dtype(">i8"), "int": np.dtype(">i4"), "short": np.dtype(">i2"), "byte": np.dtype("i1"),
               "double": np.dtype(">f8"), "float": np.dtype(">f4")}


@numba.njit(cache=True, nogil=True)
def walk_key_group(buf, state_id, prefix, key_group, key_at, key_len, val_at, val_len):  # pragma: no cover - compiled
    """Positions of the entries of ``state_id`` in one key-group; returns (count, error, error position)."""
    size = buf.shape[0]
    if size < 2:
        return 0, WALK_OVERRUN, 0
    current = (np.int64(buf[0]) << 8) | buf[1]
    pos = 2
    n = 0
    while True:
        if pos + 4 > size:
            return n, WALK_OVERRUN, pos
        klen = (np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8) | buf[pos + 3]
        kat = pos + 4
        vpos = kat + klen
        if klen < prefix or klen >= 0x80000000 or vpos + 4 > size:
            return n, WALK_OVERRUN, pos
        vlen = (np.int64(buf[vpos]) << 24) | (np.int64(buf[vpos + 1]) << 16) | (np.int64(buf[vpos + 2]) << 8) | buf[vpos + 3]
        vat = vpos + 4
        pos = vat + vlen
        if vlen >= 0x80000000 or pos > size:
            return n, WALK_OVERRUN, vpos
        first = buf[kat]
        if current == state_id:
            if prefix == 1:
                group = first & 0x7F
            else:
                group = (np.int64(first & 0x7F) << 8) | buf[kat + 1]
            if group != key_group:
                return n, WALK_WRONG_GROUP, kat
            key_at[n] = kat
            key_len[n] = klen
            val_at[n] = vat
            val_len[n] = vlen
            n += 1
        if first & FLAG:
            if pos + 2 > size:
                return n, WALK_OVERRUN, pos
            current = (np.int64(buf[pos]) << 8) | buf[pos + 1]
            pos += 2
            if current == END_OF_KEY_GROUP:
                if pos != size:
                    return n, WALK_OVERRUN, pos
                return n, WALK_OK, pos


@numba.njit(cache=True, nogil=True)
def java_ascii_strings(buf, at, starts, lengths):  # pragma: no cover - compiled
    """StringValue strings whose length and characters are all single-byte varints (ASCII).

    Returns the index of the first string that is not (or -1): the caller decodes those rows
    with the general decoder."""
    for i in range(at.shape[0]):
        p = at[i]
        n = buf[p]
        if n == 0 or n >= 0x80:
            return i
        n -= 1
        for j in range(p + 1, p + 1 + n):
            if buf[j] >= 0x80:
                return i
        starts[i] = p + 1
        lengths[i] = n
    return -1


@numba.njit(cache=True, nogil=True)
def _gather(buf, at, width, out):  # pragma: no cover - compiled
    for i in range(at.shape[0]):
        p = at[i]
        for j in range(width):
            out[i, j] = buf[p + j]


@numba.njit(cache=True, nogil=True)
def _copy_ranges(buf, starts, lengths, offsets, out):  # pragma: no cover - compiled
    for i in range(starts.shape[0]):
        p = starts[i]
        q = offsets[i]
        for j in range(lengths[i]):
            out[q + j] = buf[p + j]


def gather(buf: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each position, as an (n, width) uint8 array."""
    out = np.empty((at.shape[0], width), dtype=np.uint8)
    _gather(buf, at, width, out)
    return out


def strings_from_ranges(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, nulls: np.ndarray | None,
                        arrow: pa.DataType) -> pa.Array:
    """An Arrow string/binary array cut out of ``buf`` without a Python object per value."""
    n = starts.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    _copy_ranges(buf, starts, lengths, offsets, data)
    large = pa.large_string() if pa.types.is_string(arrow) else pa.large_binary()
    validity = None if nulls is None or not nulls.any() else pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    array = pa.Array.from_buffers(large, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    return array.cast(arrow)


@dataclass(frozen=True)
class ColumnPlan:
    """How to cut one column out of the entries: ``kind`` picks the extractor."""

    kind: str  # "const_null" | "java_scalar" | "java_string" | "row_fields" | "row_single" | "time_window"
    arrow: pa.DataType
    desc: TypeDescriptor


def _row_field_ok(desc: TypeDescriptor) -> bool:
    return desc.kind in SLOT_DTYPES or desc.kind in ("CHAR", "VARCHAR", "BINARY", "VARBINARY") or (
        desc.kind == "DECIMAL" and desc.attr("precision") <= 18) or (
        desc.kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE") and desc.attr("precision") <= 3)


def plan_column(desc: TypeDescriptor, *, key: bool = False) -> ColumnPlan | None:
    """A column plan for a type, or None when the general decoders must be used."""
    column = key_column_type(desc) if key else desc
    arrow = arrow_type(column)
    if desc.kind in ("void_namespace",):
        return ColumnPlan("const_null", arrow, desc)
    if desc.kind in JAVA_DTYPES:
        return ColumnPlan("java_scalar", arrow, desc)
    if desc.kind == "string":
        return ColumnPlan("java_string", arrow, desc)
    if desc.kind == "time_window":
        return ColumnPlan("time_window", arrow, desc)
    if desc.kind == "rowdata" and desc.fields and all(_row_field_ok(t) for _, t in desc.fields):
        return ColumnPlan("row_single" if column is not desc else "row_fields", arrow, desc)
    return None


class ColumnExtractor:
    """Cuts key, namespace and value columns out of framed entries of one key-group."""

    def __init__(self, key: ColumnPlan, namespace: ColumnPlan, value: ColumnPlan, prefix: int):
        self.key, self.namespace, self.value = key, namespace, value
        self.prefix = prefix
        self.namespace_width = namespace.desc.fixed_length

    def extract(self, buf: np.ndarray, key_at, key_len, val_at, val_len):
        """(key, namespace, value) arrays, or None when some entry needs the general decoder."""
        key_start = key_at + self.prefix
        key_array, key_end = self._column(self.key, buf, key_start, None)
        if key_array is None:
            return None
        ns_array, ns_end = self._column(self.namespace, buf, key_end, None)
        if ns_array is None or not np.array_equal(ns_end, key_at + key_len):
            return None
        value_array, value_end = self._column(self.value, buf, val_at, val_len)
        if value_array is None or not np.array_equal(value_end, val_at + val_len):
            return None
        return key_array, ns_array, value_array

    def _column(self, plan: ColumnPlan, buf, at, length):
        """The column and, per entry, the position after its bytes (None if not decodable here)."""
        kind = plan.kind
        n = at.shape[0]
        if kind == "const_null":
            return pa.nulls(n, plan.arrow), at + plan.desc.fixed_length
        if kind == "java_scalar":
            dtype = JAVA_DTYPES[plan.desc.kind]
            values = gather(buf, at, dtype.itemsize).view(dtype).reshape(n).astype(dtype.newbyteorder("="))
            return pa.array(values, type=plan.arrow), at + dtype.itemsize
        if kind == "time_window":
            pairs = gather(buf, at, 16).view(">i8").reshape(n, 2).astype(np.int64)
            return pa.StructArray.from_arrays([pa.array(pairs[:, 0]), pa.array(pairs[:, 1])], names=["start", "end"]), at + 16
        if kind == "java_string":
            starts = np.empty(n, dtype=np.int64)
            lengths = np.empty(n, dtype=np.int64)
            if java_ascii_strings(buf, at, starts, lengths) != -1:
                return None, None
            return strings_from_ranges(buf, starts, lengths, None, plan.arrow), starts + lengths
        return self._binary_row(plan, buf, at, length)

    def _binary_row(self, plan: ColumnPlan, buf, at, length):
        n = at.shape[0]
        sizes = gather(buf, at, 4).view(">i4").reshape(n).astype(np.int64)
        base = at + 4
        fields = plan.desc.fields
        arity = len(fields)
        header = ((arity + 63 + 8) // 64) * 8
        if n and sizes.min() < header + 8 * arity:
            return None, None
        null_bytes = gather(buf, base, header)
        arrays = []
        for i, (name, field) in enumerate(fields):
            bit = 8 + i
            nulls = (null_bytes[:, bit >> 3] >> (bit & 7)) & 1 == 1
            slot = base + header + 8 * i
            kind = field.kind
            arrow = arrow_type(field)
            mask = nulls if nulls.any() else None
            if kind in SLOT_DTYPES:
                dtype = SLOT_DTYPES[kind]
                values = gather(buf, slot, dtype.itemsize).view(dtype).reshape(n)
                arrays.append(pa.array(values, type=arrow, mask=mask))
            elif kind == "DECIMAL":
                unscaled = gather(buf, slot, 8).view("<i8").reshape(n)
                arrays.append(_decimal_from_unscaled(unscaled, mask, arrow))
            elif kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
                millis = gather(buf, slot, 8).view("<i8").reshape(n)
                arrays.append(pa.array(millis * 1000, type=arrow, mask=mask))
            else:  # CHAR/VARCHAR/BINARY/VARBINARY: inline in the slot, or offset and length
                raw = gather(buf, slot, 8).view("<u8").reshape(n)
                inline = (raw >> np.uint64(63)) == 1
                starts = np.where(inline, slot, base + (raw >> np.uint64(32)).astype(np.int64))
                lengths = np.where(inline, (raw >> np.uint64(56)).astype(np.int64) & 0x7F,
                                   (raw & np.uint64(0xFFFFFFFF)).astype(np.int64))
                lengths = np.where(nulls, 0, lengths)
                if n and (starts + lengths > base + sizes).any():
                    return None, None
                arrays.append(strings_from_ranges(buf, starts, lengths, nulls, arrow))
        end = base + sizes
        if plan.kind == "row_single":
            return arrays[0], end
        return pa.StructArray.from_arrays(arrays, fields=list(plan.arrow)), end


def _decimal_from_unscaled(unscaled: np.ndarray, mask, arrow: pa.DataType) -> pa.Array:
    # Arrow casts integers to decimals exactly (scale 0); the scale is then applied by a view of
    # the same 128-bit integers under the target type.
    as_decimal = pa.array(unscaled, type=pa.int64()).cast(pa.decimal128(38, 0))
    buffers = as_decimal.buffers()
    validity = None if mask is None else pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(38, arrow.scale), len(unscaled), [validity, buffers[1]]).cast(arrow)
