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
from statecat.readers.binary_formats import MAX_INLINE_BYTES
from statecat.readers.decoders import MAX_DAYS, MAX_MICROS, MIN_DAYS, MIN_MICROS
from statecat.statemeta.types import TypeDescriptor, key_column_type

END_OF_KEY_GROUP = 0xFFFF
FLAG = 0x80
# Error codes of the compiled walk, turned into messages by the caller.
WALK_OK, WALK_OVERRUN, WALK_WRONG_GROUP, WALK_BAD_STATE_ID = 0, 1, 2, 3
WALK_ERRORS = {WALK_OVERRUN: "expected entry lengths within the key-group, got a length running past its end",
               WALK_WRONG_GROUP: "expected entries of this key-group only, got an entry of another key-group",
               WALK_BAD_STATE_ID: "expected a state id below the stream header's state count (or the end marker "
                                  "0xFFFF after a run), got a larger one"}
MIN_ENTRY_BYTES = 9  # i32 key length, 1 key byte, i32 value length

# SQL logical types stored in one 8-byte slot of a binary row, with their numpy dtype.
SLOT_DTYPES = {
    "BOOLEAN": np.dtype("?"), "TINYINT": np.dtype("<i1"), "SMALLINT": np.dtype("<i2"), "INTEGER": np.dtype("<i4"),
    "DATE": np.dtype("<i4"), "BIGINT": np.dtype("<i8"), "FLOAT": np.dtype("<f4"), "DOUBLE": np.dtype("<f8"),
}
JAVA_DTYPES = {"long": np.dtype(">i8"), "int": np.dtype(">i4"), "short": np.dtype(">i2"), "byte": np.dtype("i1"),
               "double": np.dtype(">f8"), "float": np.dtype(">f4")}


@numba.njit(cache=True, nogil=True)
def walk_key_group(buf, state_id, state_count, prefix, key_group, key_at, key_len, val_at, val_len):  # pragma: no cover - compiled
    """Positions of the entries of ``state_id`` in one key-group; returns (count, error, error position).

    Numba does not check bounds: every length is checked against the bytes left before it is
    used, and the output arrays' capacity before each store. Each entry advances ``pos`` by at
    least ``MIN_ENTRY_BYTES``, so the walk ends."""
    size = buf.shape[0]
    capacity = key_at.shape[0]
    if size < 2:
        return 0, WALK_OVERRUN, 0
    current = (np.int64(buf[0]) << 8) | buf[1]
    if current >= state_count:
        return 0, WALK_BAD_STATE_ID, 0
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
        if vlen >= 0x80000000 or vat + vlen > size:
            return n, WALK_OVERRUN, vpos
        pos = vat + vlen
        first = buf[kat]
        if current == state_id:
            if prefix == 1:
                group = first & 0x7F
            else:
                group = (np.int64(first & 0x7F) << 8) | buf[kat + 1]
            if group != key_group:
                return n, WALK_WRONG_GROUP, kat
            if n >= capacity:
                return n, WALK_OVERRUN, kat
            key_at[n] = kat
            key_len[n] = klen
            val_at[n] = vat
            val_len[n] = vlen
            n += 1
        if first & FLAG:
            if pos + 2 > size:
                return n, WALK_OVERRUN, pos
            current = (np.int64(buf[pos]) << 8) | buf[pos + 1]
            if current == END_OF_KEY_GROUP:
                if pos + 2 != size:
                    return n, WALK_OVERRUN, pos + 2
                return n, WALK_OK, pos + 2
            if current >= state_count:
                return n, WALK_BAD_STATE_ID, pos
            pos += 2


@numba.njit(cache=True, nogil=True)
def java_ascii_strings(buf, at, end, starts, lengths):  # pragma: no cover - compiled
    """StringValue strings whose length and characters are all single-byte varints (ASCII).

    Each string must lie within its entry (``at[i]`` to ``end[i]``). Returns the index of the
    first string that is not ASCII or not within its entry (or -1): the caller then decodes
    with the general decoder, which reports damage with its file and offset."""
    size = buf.shape[0]
    for i in range(at.shape[0]):
        p = at[i]
        stop = end[i]
        if p < 0 or p >= stop or stop > size:
            return i
        n = buf[p]
        if n == 0 or n >= 0x80:
            return i
        n -= 1
        if p + 1 + n > stop:
            return i
        for j in range(p + 1, p + 1 + n):
            if buf[j] >= 0x80:
                return i
        starts[i] = p + 1
        lengths[i] = n
    return -1


@numba.njit(cache=True, nogil=True)
def _gather(buf, at, end, width, out):  # pragma: no cover - compiled
    """Copies ``width`` bytes at each ``at[i]``; returns the first index whose bytes would pass
    ``end[i]`` or the buffer (nothing read for it), else -1."""
    size = buf.shape[0]
    for i in range(at.shape[0]):
        p = at[i]
        if p < 0 or p + width > end[i] or end[i] > size:
            return i
        for j in range(width):
            out[i, j] = buf[p + j]
    return -1


@numba.njit(cache=True, nogil=True)
def _copy_ranges(buf, starts, lengths, offsets, out):  # pragma: no cover - compiled
    """Copies each range to its offset in ``out``; returns the first index out of bounds, else -1."""
    size = buf.shape[0]
    room = out.shape[0]
    for i in range(starts.shape[0]):
        p = starts[i]
        q = offsets[i]
        n = lengths[i]
        if p < 0 or n < 0 or p + n > size or q < 0 or q + n > room:
            return i
        for j in range(n):
            out[q + j] = buf[p + j]
    return -1


def gather(buf: np.ndarray, at: np.ndarray, width: int, end: np.ndarray) -> np.ndarray | None:
    """``width`` bytes at each position, as an (n, width) uint8 array; None if some position's
    bytes would run past its ``end`` (the entry or structure it belongs to)."""
    out = np.empty((at.shape[0], width), dtype=np.uint8)
    if _gather(buf, at, end, width, out) != -1:
        return None
    return out


def strings_from_ranges(buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, nulls: np.ndarray | None,
                        arrow: pa.DataType) -> pa.Array | None:
    """An Arrow string/binary array cut out of ``buf`` without a Python object per value.

    None when a range lies outside ``buf`` or a string is not valid UTF-8: the per-record decoders
    then read those rows (replacing malformed UTF-8 as Flink does, see ``decoders``)."""
    n = starts.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if n and lengths.min() < 0:
        return None
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    if _copy_ranges(buf, starts, lengths, offsets, data) != -1:
        return None
    is_string = pa.types.is_string(arrow)
    large = pa.large_string() if is_string else pa.large_binary()
    validity = None if nulls is None or not nulls.any() else pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    array = pa.Array.from_buffers(large, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    if is_string and data.size and data.max() >= 0x80:
        try:  # ASCII needs no check; anything else is checked once per array, in Arrow's compiled code
            array.validate(full=True)
        except pa.ArrowInvalid:
            return None
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
    """Cuts key, namespace and value columns out of framed entries of one key-group.

    Every read is checked against the end of the entry (or binary row) it belongs to, one vector
    comparison per column; any entry that does not fit makes ``extract`` return None, and the
    caller decodes those key-groups record by record, which names the file and offset of damage."""

    def __init__(self, key: ColumnPlan, namespace: ColumnPlan, value: ColumnPlan, prefix: int):
        self.key, self.namespace, self.value = key, namespace, value
        self.prefix = prefix
        self.namespace_width = namespace.desc.fixed_length

    def extract(self, buf: np.ndarray, key_at, key_len, val_at, val_len):
        """(key, namespace, value) arrays, or None when some entry needs the general decoder."""
        key_start = key_at + self.prefix
        key_end = key_at + key_len
        key_array, key_stop = self._column(self.key, buf, key_start, key_end)
        if key_array is None:
            return None
        ns_array, ns_stop = self._column(self.namespace, buf, key_stop, key_end)
        if ns_array is None or not np.array_equal(ns_stop, key_end):
            return None
        value_end = val_at + val_len
        value_array, value_stop = self._column(self.value, buf, val_at, value_end)
        if value_array is None or not np.array_equal(value_stop, value_end):
            return None
        return key_array, ns_array, value_array

    def _column(self, plan: ColumnPlan, buf, at, end):
        """The column and, per entry, the position after its bytes ((None, None) if not decodable
        here). ``end`` bounds each entry's bytes: nothing at or past it is read."""
        kind = plan.kind
        n = at.shape[0]
        if kind == "const_null":
            stop = at + plan.desc.fixed_length
            if n and (stop > end).any():
                return None, None
            return pa.nulls(n, plan.arrow), stop
        if kind == "java_scalar":
            dtype = JAVA_DTYPES[plan.desc.kind]
            raw = gather(buf, at, dtype.itemsize, end)
            if raw is None:
                return None, None
            values = raw.view(dtype).reshape(n).astype(dtype.newbyteorder("="))
            return pa.array(values, type=plan.arrow), at + dtype.itemsize
        if kind == "time_window":
            raw = gather(buf, at, 16, end)
            if raw is None:
                return None, None
            pairs = raw.view(">i8").reshape(n, 2).astype(np.int64)
            return pa.StructArray.from_arrays([pa.array(pairs[:, 0]), pa.array(pairs[:, 1])], names=["start", "end"]), at + 16
        if kind == "java_string":
            starts = np.empty(n, dtype=np.int64)
            lengths = np.empty(n, dtype=np.int64)
            if java_ascii_strings(buf, at, end, starts, lengths) != -1:
                return None, None
            strings = strings_from_ranges(buf, starts, lengths, None, plan.arrow)
            return (None, None) if strings is None else (strings, starts + lengths)
        return self._binary_row(plan, buf, at, end)

    def _binary_row(self, plan: ColumnPlan, buf, at, end):
        n = at.shape[0]
        raw_sizes = gather(buf, at, 4, end)
        if raw_sizes is None:
            return None, None
        sizes = raw_sizes.view(">i4").reshape(n).astype(np.int64)
        base = at + 4
        row_end = base + sizes
        fields = plan.desc.fields
        arity = len(fields)
        header = ((arity + 63 + 8) // 64) * 8
        # The row's size comes from the data: it must hold the fixed part and stay in its entry
        # before anything at ``row_end`` (the namespace after a key) is read.
        if n and (sizes.min() < header + 8 * arity or (row_end > end).any()):
            return None, None
        null_bytes = gather(buf, base, header, row_end)
        if null_bytes is None:
            return None, None
        arrays = []
        for i, (name, field) in enumerate(fields):
            bit = 8 + i
            nulls = (null_bytes[:, bit >> 3] >> (bit & 7)) & 1 == 1
            slot = base + header + 8 * i
            kind = field.kind
            arrow = arrow_type(field)
            mask = nulls if nulls.any() else None
            dtype = SLOT_DTYPES.get(kind)
            raw = gather(buf, slot, 8 if dtype is None else dtype.itemsize, row_end)
            if raw is None:
                return None, None
            if dtype is not None:
                values = raw.view(dtype).reshape(n)
                if kind == "DATE" and _outside(values, mask, nulls, MIN_DAYS, MAX_DAYS):
                    return None, None  # the general path reports it
                arrays.append(pa.array(values, type=arrow, mask=mask))
            elif kind == "DECIMAL":
                unscaled = raw.view("<i8").reshape(n)
                limit = 10 ** field.attr("precision")
                if _outside(unscaled, mask, nulls, 1 - limit, limit - 1):
                    return None, None  # more digits than the type's precision: the general path reports it
                arrays.append(_decimal_from_unscaled(unscaled, mask, arrow))
            elif kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE"):
                millis = raw.view("<i8").reshape(n)
                if _outside(millis, mask, nulls, MIN_MICROS // 1000, MAX_MICROS // 1000):
                    return None, None  # outside the years 1..9999: the general path reports it
                arrays.append(pa.array(millis * 1000, type=arrow, mask=mask))
            else:  # CHAR/VARCHAR/BINARY/VARBINARY: inline in the slot, or offset and length
                raw = raw.view("<u8").reshape(n)
                inline = (raw >> np.uint64(63)) == 1
                starts = np.where(inline, slot, base + (raw >> np.uint64(32)).astype(np.int64))
                lengths = np.where(inline, (raw >> np.uint64(56)).astype(np.int64) & 0x7F,
                                   (raw & np.uint64(0xFFFFFFFF)).astype(np.int64))
                lengths = np.where(nulls, 0, lengths)
                starts = np.where(nulls, base, starts)
                if n and ((starts + lengths > row_end).any()
                          or (inline & (lengths > MAX_INLINE_BYTES)).any()):
                    return None, None
                strings = strings_from_ranges(buf, starts, lengths, nulls, arrow)
                if strings is None:
                    return None, None
                arrays.append(strings)
        if plan.kind == "row_single":
            return arrays[0], row_end
        return pa.StructArray.from_arrays(arrays, fields=list(plan.arrow)), row_end


def _outside(values: np.ndarray, mask, nulls: np.ndarray, low: int, high: int) -> bool:
    """Whether a non-null value lies outside [low, high] (one vector pass each way)."""
    live = values if mask is None else values[~nulls]
    return bool(live.size) and (live.min() < low or live.max() > high)


def _decimal_from_unscaled(unscaled: np.ndarray, mask, arrow: pa.DataType) -> pa.Array:
    # Arrow casts integers to decimals exactly (scale 0); the scale is then applied by a view of
    # the same 128-bit integers under the target type.
    as_decimal = pa.array(unscaled, type=pa.int64()).cast(pa.decimal128(38, 0))
    buffers = as_decimal.buffers()
    validity = None if mask is None else pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(38, arrow.scale), len(unscaled), [validity, buffers[1]]).cast(arrow)
