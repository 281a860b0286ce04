"""Column-wise decoding of keyed state for the common layouts, at compiled speed.

The key-group framing (length-prefixed key and value per entry, flags between state runs) is a
sequential walk, so it runs compiled (numba). What it yields — each entry's key and value position
— lets fixed-width fields be gathered column-wise with numpy and strings be cut into Arrow buffers
without a Python object per row. States whose types are outside this plan use the general
per-record decoders in ``scan.py``; both give the same rows (tested).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numba
import numpy as np
import pyarrow as pa

from statecat.readers.codecs.arrow_types import arrow_type
from statecat.readers.codecs.decoders import (
    MAX_DAYS,
    MAX_MICROS,
    MIN_DAYS,
    MIN_MICROS,
    ROW_KIND_BITS,
    TIMER_TIMESTAMP_FLIP,
)
from statecat.readers.codecs.rowdata import MAX_INLINE_BYTES
from statecat.statemeta.types import TypeDescriptor, key_column_type

END_OF_KEY_GROUP = 0xFFFF
FLAG = 0x80
# Error codes of the compiled walk, turned into messages by the caller.
WALK_OK, WALK_OVERRUN, WALK_WRONG_GROUP, WALK_BAD_STATE_ID = 0, 1, 2, 3
WALK_ERRORS = {
    WALK_OVERRUN: "expected entry lengths within the key-group, got a length running past its end",
    WALK_WRONG_GROUP: "expected entries of this key-group only, got an entry of another key-group",
    WALK_BAD_STATE_ID: "expected a state id below the stream header's state count (or the end marker "
    "0xFFFF after a run), got a larger one",
}
MIN_ENTRY_BYTES = 9  # i32 key length, 1 key byte, i32 value length

# SQL logical types stored in one 8-byte slot of a binary row, with their numpy dtype.
SLOT_DTYPES = {
    "BOOLEAN": np.dtype("?"),
    "TINYINT": np.dtype("<i1"),
    "SMALLINT": np.dtype("<i2"),
    "INTEGER": np.dtype("<i4"),
    "DATE": np.dtype("<i4"),
    "BIGINT": np.dtype("<i8"),
    "FLOAT": np.dtype("<f4"),
    "DOUBLE": np.dtype("<f8"),
}
JAVA_DTYPES: dict[str, np.dtype] = {
    "long": np.dtype(">i8"),
    "int": np.dtype(">i4"),
    "short": np.dtype(">i2"),
    "byte": np.dtype("i1"),
    "double": np.dtype(">f8"),
    "float": np.dtype(">f4"),
}


@numba.njit(cache=True, nogil=True)
def walk_key_group_all(
    buf: np.ndarray,
    state_count: int,
    prefix: int,
    key_group: int,
    state_of: np.ndarray,
    key_at: np.ndarray,
    key_len: np.ndarray,
    val_at: np.ndarray,
    val_len: np.ndarray,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """Positions of the entries of every state in one key-group, with each entry's state id in
    ``state_of``; returns (count, error, error position).

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
        klen = (
            (np.int64(buf[pos]) << 24) | (np.int64(buf[pos + 1]) << 16) | (np.int64(buf[pos + 2]) << 8) | buf[pos + 3]
        )
        kat = pos + 4
        vpos = kat + klen
        if klen < prefix or klen >= 0x80000000 or vpos + 4 > size:
            return n, WALK_OVERRUN, pos
        vlen = (
            (np.int64(buf[vpos]) << 24)
            | (np.int64(buf[vpos + 1]) << 16)
            | (np.int64(buf[vpos + 2]) << 8)
            | buf[vpos + 3]
        )
        vat = vpos + 4
        if vlen >= 0x80000000 or vat + vlen > size:
            return n, WALK_OVERRUN, vpos
        pos = vat + vlen
        first = buf[kat]
        if prefix == 1:
            group = first & 0x7F
        else:
            group = (np.int64(first & 0x7F) << 8) | buf[kat + 1]
        if group != key_group:
            return n, WALK_WRONG_GROUP, kat
        if n >= capacity:
            return n, WALK_OVERRUN, kat
        state_of[n] = current
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
def java_ascii_column(
    buf: np.ndarray, at: np.ndarray, end: np.ndarray, offsets: np.ndarray, data: np.ndarray, stops: np.ndarray
) -> int:  # pragma: no cover - compiled
    """StringValue strings whose length and characters are all single-byte varints (ASCII), copied
    into an Arrow string column (``offsets``, ``data``) in the same pass that checks them.

    Each string must lie within its entry (``at[i]`` to ``end[i]``); ``stops[i]`` gets the position
    after it. Returns the index of the first string that is not ASCII, not within its entry or not
    within ``data`` (or -1): the caller then decodes with the general decoder, which reports damage
    with its file and offset."""
    size = buf.shape[0]
    room = data.shape[0]
    q = 0
    offsets[0] = 0
    for i in range(at.shape[0]):
        p = at[i]
        stop = end[i]
        if p < 0 or p >= stop or stop > size:
            return i
        n = buf[p]
        if n == 0 or n >= 0x80:
            return i
        n -= 1
        p += 1
        if p + n > stop or q + n > room:
            return i
        for j in range(n):
            c = buf[p + j]
            if c >= 0x80:
                return i
            data[q + j] = c
        q += n
        offsets[i + 1] = q
        stops[i] = p + n
    return -1


@numba.njit(cache=True, nogil=True)
def _gather(
    buf: np.ndarray, at: np.ndarray, end: np.ndarray, width: int, out: np.ndarray
) -> int:  # pragma: no cover - compiled
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
def _copy_ranges(
    buf: np.ndarray, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray, out: np.ndarray
) -> int:  # pragma: no cover - compiled
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


@numba.njit(cache=True, nogil=True)
def run_starts(buf: np.ndarray, at: np.ndarray, end: np.ndarray, out: np.ndarray) -> int:  # pragma: no cover - compiled
    """Marks in ``out`` each entry whose bytes ``at[i]:end[i]`` differ from the previous entry's
    (the first byte compared without Flink's "meta data follows" flag bit, 0x80): where a MapState
    row (entries sharing key-group, key and namespace bytes) starts. Returns the first index whose
    range is outside ``buf``, else -1."""
    size = buf.shape[0]
    for i in range(at.shape[0]):
        p = at[i]
        n = end[i] - p
        if p < 0 or n < 1 or end[i] > size:
            return i
        if i == 0:
            out[i] = True
            continue
        q = at[i - 1]
        if end[i - 1] - q != n or (buf[p] & 0x7F) != (buf[q] & 0x7F):
            out[i] = True
            continue
        same = True
        for j in range(1, n):
            if buf[p + j] != buf[q + j]:
                same = False
                break
        out[i] = not same
    return -1


@numba.njit(cache=True, nogil=True)
def list_fixed_elements(
    buf: np.ndarray, at: np.ndarray, end: np.ndarray, width: int, counts: np.ndarray, starts: np.ndarray
) -> int:  # pragma: no cover - compiled
    """Elements of ``width`` bytes separated by the delimiter 0x2C, per value ``at[i]:end[i]``:
    counts per value, and each element's position in ``starts`` (room for every byte). Returns the
    first value that does not split exactly (or lies outside ``buf``), else -1."""
    size = buf.shape[0]
    room = starts.shape[0]
    k = 0
    for i in range(at.shape[0]):
        p = at[i]
        stop = end[i]
        if p < 0 or stop < p or stop > size:
            return i
        c = 0
        while p < stop:
            if p + width > stop or k >= room:
                return i
            starts[k] = p
            k += 1
            c += 1
            p += width
            if p < stop:
                if buf[p] != 0x2C:
                    return i
                p += 1
                if p == stop:  # a trailing delimiter: not Flink's framing
                    return i
        counts[i] = c
    return -1


@numba.njit(cache=True, nogil=True)
def list_ascii_strings(
    buf: np.ndarray, at: np.ndarray, end: np.ndarray, counts: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> int:  # pragma: no cover - compiled
    """StringValue elements (ASCII, non-null) separated by 0x2C, per value ``at[i]:end[i]``.
    Returns the first value that is not such a list (or lies outside ``buf``), else -1."""
    size = buf.shape[0]
    room = starts.shape[0]
    k = 0
    for i in range(at.shape[0]):
        p = at[i]
        stop = end[i]
        if p < 0 or stop < p or stop > size:
            return i
        c = 0
        while p < stop:
            n = buf[p]
            if n == 0 or n >= 0x80 or k >= room:
                return i
            n -= 1
            if p + 1 + n > stop:
                return i
            for j in range(p + 1, p + 1 + n):
                if buf[j] >= 0x80:
                    return i
            starts[k] = p + 1
            lengths[k] = n
            k += 1
            c += 1
            p += 1 + n
            if p < stop:
                if buf[p] != 0x2C:
                    return i
                p += 1
                if p == stop:
                    return i
        counts[i] = c
    return -1


@numba.njit(cache=True, nogil=True)
def _binary_rows(
    buf: np.ndarray,
    at: np.ndarray,
    end: np.ndarray,
    header: int,
    sizes: np.ndarray,
    slots: np.ndarray,
    nulls: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Binary rows (i32 size, null bits, 8-byte slots) at ``at[i]``, each within ``end[i]``: their
    sizes, each field's slot as a little-endian integer (``slots[field, row]``) and null bit.
    Returns the first row whose size does not hold the fixed part or whose bytes pass its end or
    the buffer (nothing read past either), else -1."""
    size = buf.shape[0]
    arity = slots.shape[0]
    fixed = header + 8 * arity
    for r in range(at.shape[0]):
        p = at[r]
        e = end[r]
        if p < 0 or p + 4 > e or e > size:
            return r
        n = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) | buf[p + 3]
        if n >= 0x80000000 or n < fixed or p + 4 + n > e:
            return r
        sizes[r] = n
        b = p + 4
        for i in range(arity):
            bit = 8 + i
            nulls[i, r] = (buf[b + (bit >> 3)] >> (bit & 7)) & 1 == 1
            q = b + header + 8 * i
            v = np.uint64(0)
            for j in range(8):
                v |= np.uint64(buf[q + j]) << np.uint64(8 * j)
            slots[i, r] = v
    return -1


@numba.njit(cache=True, nogil=True)
def _binary_strings(
    raw: np.ndarray,
    slot: np.ndarray,
    base: np.ndarray,
    row_end: np.ndarray,
    nulls: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
) -> int:  # pragma: no cover - compiled
    """Where each string/binary field's bytes are: inline in its slot (top bit set, length in the
    next 7 bits) or at an offset from the row's start with a length. Returns the first row whose
    bytes would pass its row's end (or an inline length over 7), else -1. Null fields: empty."""
    for r in range(raw.shape[0]):
        if nulls[r]:
            starts[r] = base[r]
            lengths[r] = 0
            continue
        v = raw[r]
        if v >> np.uint64(63):
            at = slot[r]
            n = np.int64((v >> np.uint64(56)) & np.uint64(0x7F))
            if n > MAX_INLINE_BYTES:
                return r
        else:
            at = base[r] + np.int64(v >> np.uint64(32))
            n = np.int64(v & np.uint64(0xFFFFFFFF))
        if at + n > row_end[r]:
            return r
        starts[r] = at
        lengths[r] = n
    return -1


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def gather(buf: np.ndarray, at: np.ndarray, width: int, end: np.ndarray) -> np.ndarray | None:
    """``width`` bytes at each position, as an (n, width) uint8 array; None if some position's
    bytes would run past its ``end`` (the entry or structure it belongs to)."""
    out = np.empty((at.shape[0], width), dtype=np.uint8)
    if _gather(buf, at, end, width, out) != -1:
        return None
    return out


def strings_from_ranges(
    buf: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    nulls: np.ndarray | None,
    arrow: pa.DataType,
    *,
    ascii_checked: bool = False,
) -> pa.Array | None:
    """An Arrow string/binary array cut out of ``buf`` without a Python object per value.

    None when a range lies outside ``buf`` or a string is not valid UTF-8: the per-record decoders
    then read those rows (replacing malformed UTF-8 as Flink does, see ``decoders``).
    ``ascii_checked``: the caller's compiled walk already saw every byte below 0x80."""
    n = starts.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if n and lengths.min() < 0:
        return None
    data = np.empty(int(offsets[-1]), dtype=np.uint8)
    if _copy_ranges(buf, starts, lengths, offsets, data) != -1:
        return None
    is_string = pa.types.is_string(arrow) or pa.types.is_large_string(arrow)
    validity = None if nulls is None or not nulls.any() else pa.py_buffer(np.packbits(~nulls, bitorder="little"))
    if offsets[-1] < 2**31 and (pa.types.is_string(arrow) or pa.types.is_binary(arrow)):
        # 32-bit offsets: the column's own type, no cast (a copy of the offsets) afterwards
        array = pa.Array.from_buffers(arrow, n, [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])
    else:
        large = pa.large_string() if is_string else pa.large_binary()
        array = pa.Array.from_buffers(large, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    if is_string and not ascii_checked and data.size and data.max() >= 0x80:
        try:  # ASCII needs no check; anything else is checked once per array, in Arrow's compiled code
            array.validate(full=True)
        except pa.ArrowInvalid:
            return None
    return array if array.type == arrow else array.cast(arrow)


def ascii_string_column(
    buf: np.ndarray, at: np.ndarray, end: np.ndarray, arrow: pa.DataType
) -> tuple[pa.Array | None, np.ndarray | None]:
    """Java strings of ASCII characters as an Arrow column, and the position after each; (None,
    None) when some string needs the per-record decoders."""
    n = at.shape[0]
    if n and bool((end < at).any()):  # damage: an entry ending before its string; the per-record decoders say where
        return None, None
    room = int((end - at).sum()) if n else 0  # no string is longer than its entry
    wide = room >= 2**31
    offsets = np.empty(n + 1, dtype=np.int64 if wide else np.int32)
    data = np.empty(room, dtype=np.uint8)
    stops = np.empty(n, dtype=np.int64)
    if java_ascii_column(buf, at, end, offsets, data, stops) != -1:
        return None, None
    data = data[: int(offsets[-1])]
    column = pa.large_string() if wide else pa.string()
    array = pa.Array.from_buffers(column, n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return (array if array.type == arrow else array.cast(arrow)), stops


@dataclass(frozen=True)
class ColumnPlan:
    """How to cut one column out of the entries: ``kind`` picks the extractor."""

    kind: str  # "const_null" | "java_scalar" | "java_string" | "java_bytes" | "row_fields" | "row_single"
    #           | "time_window" | "java_struct" | "java_struct_single"
    arrow: pa.DataType
    desc: TypeDescriptor
    fields: tuple = ()  # java_struct(_single): the fields' plans


def _row_field_ok(desc: TypeDescriptor) -> bool:
    return (
        desc.kind in SLOT_DTYPES
        or desc.kind in ("CHAR", "VARCHAR", "BINARY", "VARBINARY")
        or (desc.kind == "DECIMAL" and desc.attr("precision") <= 18)
        or (
            desc.kind in ("TIMESTAMP_WITHOUT_TIME_ZONE", "TIMESTAMP_WITH_LOCAL_TIME_ZONE")
            and desc.attr("precision") <= 3
        )
    )


def plan_column(desc: TypeDescriptor, *, key: bool = False) -> ColumnPlan | None:
    """A column plan for a type, or None when the general decoders must be used."""
    column = key_column_type(desc) if key else desc
    arrow = arrow_type(column)
    if desc.kind in ("void_namespace", "global_window"):
        return ColumnPlan("const_null", arrow, desc)
    if desc.kind in JAVA_DTYPES:
        return ColumnPlan("java_scalar", arrow, desc)
    if desc.kind == "string":
        return ColumnPlan("java_string", arrow, desc)
    if desc.kind == "time_window":
        return ColumnPlan("time_window", arrow, desc)
    if desc.kind == "bytes" and pa.types.is_binary(arrow):
        return ColumnPlan("java_bytes", arrow, desc)
    if desc.kind == "rowdata" and desc.fields and all(_row_field_ok(t) for _, t in desc.fields):
        return ColumnPlan("row_single" if column is not desc else "row_fields", arrow, desc)
    if desc.kind in ("row", "tuple") and desc.fields and not desc.attr("codec"):
        # DataStream Row (null mask, then the non-null fields) and Tuple (fields one after another)
        fields = tuple(plan_column(t) for _, t in desc.fields)
        if any(f is None or f.kind not in ("java_scalar", "java_string", "java_bytes") for f in fields):
            return None
        return ColumnPlan("java_struct_single" if column is not desc else "java_struct", arrow, desc, fields)
    return None


class ColumnExtractor:
    """Cuts key, namespace and value columns out of framed entries of one key-group.

    Every read is checked against the end of the entry (or binary row) it belongs to, one vector
    comparison per column; any entry that does not fit makes ``extract`` return None, and the
    caller decodes those key-groups record by record, which names the file and offset of damage."""

    def __init__(
        self,
        key: ColumnPlan,
        namespace: ColumnPlan,
        value: ColumnPlan | None,
        prefix: int,
        *,
        mode: str = "value",
        user_key: ColumnPlan | None = None,
        value_arrow: pa.DataType | None = None,
    ) -> None:
        """``mode``: "value" (one value per entry), "timer" (timestamp, key and namespace all in
        the entry's key), "map" (MapState: the user key after the namespace, a null flag before the
        value; consecutive entries of one key and namespace make one row) or "list" (ListState:
        ``value`` plans the elements). ``value_arrow``: the value column's type (map, list)."""
        self.key, self.namespace, self.value = key, namespace, value
        self.prefix = prefix
        self.namespace_width = namespace.desc.fixed_length
        self.mode = mode
        self.user_key = user_key
        self.value_arrow = value_arrow

    def extract(
        self, buf: np.ndarray, key_at: np.ndarray, key_len: np.ndarray, val_at: np.ndarray, val_len: np.ndarray
    ) -> tuple[pa.Array, pa.Array, pa.Array] | None:
        """(key, namespace, value) arrays, or None when some entry needs the general decoder."""
        mode = self.mode
        key_start = key_at + (self.prefix + (8 if mode == "timer" else 0))  # one whole-array add
        key_end = key_at + key_len
        # casts: a column's stops are set whenever its array is; the value plan, in every mode but "timer"
        key_array, key_stop = self._column(self.key, buf, key_start, key_end)
        if key_array is None:
            return None
        ns_array, ns_stop = self._column(self.namespace, buf, cast(np.ndarray, key_stop), key_end)
        if ns_array is None:
            return None
        if mode == "map":
            return self._map(
                buf, key_at, key_end, cast(np.ndarray, ns_stop), val_at, val_at + val_len, key_array, ns_array
            )
        if not np.array_equal(cast(np.ndarray, ns_stop), key_end):
            return None
        if mode == "timer":  # Flink flips the sign bit so timers sort by time as unsigned bytes
            raw = gather(buf, key_at + self.prefix, 8, key_end)
            if raw is None:
                return None
            stamps = (raw.view(">u8").reshape(-1) ^ np.uint64(TIMER_TIMESTAMP_FLIP)).view(np.int64)
            return key_array, ns_array, pa.array(stamps.astype(np.int64), type=pa.int64())
        value_end = val_at + val_len
        if mode == "list":
            value_array = self._list(buf, val_at, value_end)
            return None if value_array is None else (key_array, ns_array, value_array)
        value_array, value_stop = self._column(cast(ColumnPlan, self.value), buf, val_at, value_end)
        if value_array is None or not np.array_equal(cast(np.ndarray, value_stop), value_end):
            return None
        return key_array, ns_array, value_array

    def _map(
        self,
        buf: np.ndarray,
        key_at: np.ndarray,
        key_end: np.ndarray,
        ns_stop: np.ndarray,
        val_at: np.ndarray,
        val_end: np.ndarray,
        key_array: pa.Array,
        ns_array: pa.Array,
    ) -> tuple[pa.Array, pa.Array, pa.Array] | None:
        n = key_at.shape[0]
        # casts: map mode has both plans; a column's stops are set whenever its array is
        user_keys, user_stop = self._column(cast(ColumnPlan, self.user_key), buf, ns_stop, key_end)
        if user_keys is None or not np.array_equal(cast(np.ndarray, user_stop), key_end):
            return None
        flags = gather(buf, val_at, 1, val_end)
        if flags is None or (n and flags.any()):
            return None  # null map values: the general decoder reads them
        values, value_stop = self._column(cast(ColumnPlan, self.value), buf, val_at + 1, val_end)
        if values is None or not np.array_equal(cast(np.ndarray, value_stop), val_end):
            return None
        starts = np.empty(n, dtype=np.bool_)
        if run_starts(buf, key_at, ns_stop, starts) != -1:
            return None
        rows = np.flatnonzero(starts)
        offsets = pa.array(np.append(rows, n).astype(np.int32))
        maps = pa.MapArray.from_arrays(offsets, user_keys, values, type=self.value_arrow)
        return key_array.take(rows), ns_array.take(rows), maps

    def _list(self, buf: np.ndarray, at: np.ndarray, end: np.ndarray) -> pa.Array | None:
        n = at.shape[0]
        plan = cast(ColumnPlan, self.value)  # list mode plans the elements
        room = int((end - at).sum()) + 1  # every element takes at least one byte
        counts = np.zeros(n, dtype=np.int64)
        starts = np.empty(room, dtype=np.int64)
        if plan.kind == "java_scalar":
            dtype = JAVA_DTYPES[plan.desc.kind]
            if list_fixed_elements(buf, at, end, dtype.itemsize, counts, starts) != -1:
                return None
            k = int(counts.sum())
            starts = starts[:k]
            raw = gather(buf, starts, dtype.itemsize, starts + dtype.itemsize)
            if raw is None:
                return None
            elements = pa.array(raw.view(dtype).reshape(k).astype(dtype.newbyteorder("=")), type=plan.arrow)
        else:  # java_string
            lengths = np.empty(room, dtype=np.int64)
            if list_ascii_strings(buf, at, end, counts, starts, lengths) != -1:
                return None
            k = int(counts.sum())
            elements = strings_from_ranges(buf, starts[:k], lengths[:k], None, plan.arrow, ascii_checked=True)
            if elements is None:
                return None
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        return pa.ListArray.from_arrays(pa.array(offsets), elements, type=self.value_arrow)

    def _column(
        self, plan: ColumnPlan, buf: np.ndarray, at: np.ndarray, end: np.ndarray
    ) -> tuple[pa.Array | None, np.ndarray | None]:
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
            return pa.StructArray.from_arrays(
                [pa.array(pairs[:, 0]), pa.array(pairs[:, 1])], names=["start", "end"]
            ), at + 16
        if kind == "java_string":
            return ascii_string_column(buf, at, end, plan.arrow)
        if kind == "java_bytes":  # i32 length, then the bytes
            raw = gather(buf, at, 4, end)
            if raw is None:
                return None, None
            lengths = raw.view(">i4").reshape(n).astype(np.int64)
            starts = at + 4
            if n and (lengths.min() < 0 or (starts + lengths > end).any()):
                return None, None
            array = strings_from_ranges(buf, starts, lengths, None, plan.arrow)
            return (None, None) if array is None else (array, starts + lengths)
        if kind in ("java_struct", "java_struct_single"):
            return self._java_struct(plan, buf, at, end)
        return self._binary_row(plan, buf, at, end)

    def _java_struct(
        self, plan: ColumnPlan, buf: np.ndarray, at: np.ndarray, end: np.ndarray
    ) -> tuple[pa.Array | None, np.ndarray | None]:
        """A Row without null fields (its mask bits all clear) or a Tuple: fields in sequence."""
        n = at.shape[0]
        pos = at
        if plan.desc.kind == "row":
            skip = ROW_KIND_BITS if plan.desc.attr("row_kind", False) else 0
            count = len(plan.fields)
            mask_bytes = (count + skip + 7) // 8
            mask = gather(buf, at, mask_bytes, end)
            if mask is None:
                return None, None
            for i in range(count):
                bit = i + skip
                if n and (mask[:, bit // 8] & (0x80 >> (bit % 8))).any():
                    return None, None  # a null field: the general decoder reads it
            pos = at + mask_bytes
        arrays = []
        for field in plan.fields:
            array, pos = self._column(field, buf, pos, end)  # type: ignore[assignment]  # pos is set whenever array is
            if array is None:
                return None, None
            arrays.append(array)
        if plan.kind == "java_struct_single":
            return arrays[0], pos
        return pa.StructArray.from_arrays(arrays, fields=list(plan.arrow)), pos

    def _binary_row(
        self, plan: ColumnPlan, buf: np.ndarray, at: np.ndarray, end: np.ndarray
    ) -> tuple[pa.Array | None, np.ndarray | None]:
        n = at.shape[0]
        fields = plan.desc.fields
        arity = len(fields)
        header = ((arity + 63 + 8) // 64) * 8
        # One compiled pass reads each row's size, null bits and fixed-part slots; the row's size
        # comes from the data, so it is checked to hold the fixed part and stay in its entry.
        sizes = np.empty(n, dtype=np.int64)
        slots = np.empty((arity, n), dtype=np.uint64)
        null_bits = np.empty((arity, n), dtype=np.bool_)
        if _binary_rows(buf, at, end, header, sizes, slots, null_bits) != -1:
            return None, None
        base = at + 4
        row_end = base + sizes
        arrays = []
        for i, (_name, field) in enumerate(fields):
            nulls = null_bits[i]
            kind = field.kind
            arrow = arrow_type(field)
            mask = nulls if nulls.any() else None
            dtype = SLOT_DTYPES.get(kind)
            raw = slots[i]  # the slot's 8 bytes as a little-endian integer: narrower types are its low bytes
            if dtype is not None:
                values = raw.astype(_UNSIGNED[dtype.itemsize]).view(dtype) if dtype.itemsize < 8 else raw.view(dtype)
                if kind == "DATE" and _outside(values, mask, nulls, MIN_DAYS, MAX_DAYS):
                    return None, None  # the general path reports it
                arrays.append(pa.array(values, type=arrow, mask=mask))
            elif kind == "DECIMAL":
                unscaled = raw.view("<i8")
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
                starts = np.empty(n, dtype=np.int64)
                lengths = np.empty(n, dtype=np.int64)
                slot = base + (header + 8 * i)  # where the field's slot is (a whole-array add: only here)
                if _binary_strings(raw, slot, base, row_end, nulls, starts, lengths) != -1:
                    return None, None
                strings = strings_from_ranges(buf, starts, lengths, nulls, arrow)
                if strings is None:
                    return None, None
                arrays.append(strings)
        if plan.kind == "row_single":
            return arrays[0], row_end
        return pa.StructArray.from_arrays(arrays, fields=list(plan.arrow)), row_end


def _outside(values: np.ndarray, mask: np.ndarray | None, nulls: np.ndarray, low: int, high: int) -> bool:
    """Whether a non-null value lies outside [low, high] (one vector pass each way)."""
    live = values if mask is None else values[~nulls]
    return bool(live.size) and (live.min() < low or live.max() > high)


def _decimal_from_unscaled(unscaled: np.ndarray, mask: np.ndarray | None, arrow: pa.DataType) -> pa.Array:
    # Arrow casts integers to decimals exactly (scale 0); the scale is then applied by a view of
    # the same 128-bit integers under the target type.
    as_decimal = pa.array(unscaled, type=pa.int64()).cast(pa.decimal128(38, 0))
    buffers = as_decimal.buffers()
    validity = None if mask is None else pa.py_buffer(np.packbits(~mask, bitorder="little"))
    return pa.Array.from_buffers(pa.decimal128(38, arrow.scale), len(unscaled), [validity, buffers[1]]).cast(arrow)
