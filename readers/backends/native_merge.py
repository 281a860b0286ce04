"""One state's entries of one key-group, merged from its column family's SST files.

The SST files of a column family are sorted runs of internal keys (user key ascending, newest
sequence number first); RocksDB's answer for a user key is its newest version: a Put's value, a
Deletion's absence, or Merge operands combined with the version below them (Flink's list state:
the base value, then the operands oldest first, joined by ','). ``Runs.resolved`` orders every
version of the key-group by one compiled merge of the files' runs on fixed-width records (the key
as big-endian words, its length, the sequence number descending), then keeps each key's newest
version in compiled code.
It returns positions into one buffer of the decoded keys and values, which the scanner's
column-wise extraction and record decoders read as they read a savepoint key-group's. Range
deletions are not handled here: a column family with any goes through ``readers.sst.ColumnFamilyView``.
"""

from __future__ import annotations

import numba
import numpy as np

from statecat.readers.backends.sst.format import (
    TYPE_DELETION,
    TYPE_DELETION_WITH_TIMESTAMP,
    TYPE_MERGE,
    TYPE_SINGLE_DELETION,
    TYPE_VALUE,
)

MERGE_OK = 0
MERGE_UNSUPPORTED_TYPE = 1
MERGE_OUT_OF_BOUNDS = 2
MERGE_ERRORS = {
    MERGE_UNSUPPORTED_TYPE: "an entry of a value type Flink's state does not use",
    MERGE_OUT_OF_BOUNDS: "an entry outside its decoded block",
}
LIST_DELIMITER = 0x2C  # ','


@numba.njit(cache=True, nogil=True)
def _common_prefix(
    kb: np.ndarray, key_start: np.ndarray, key_len: np.ndarray, run_begin: np.ndarray, run_end: np.ndarray
) -> int:  # pragma: no cover - compiled
    """Length of the prefix every key of the runs shares (runs are sorted: first and last keys)."""
    ref = -1
    common = 0
    for r in range(run_begin.shape[0]):
        for i in (run_begin[r], run_end[r] - 1):
            if i < run_begin[r] or i >= run_end[r]:
                continue
            if ref < 0:
                ref = i
                common = key_len[i]
                continue
            n = common if common < key_len[i] else key_len[i]
            j = 0
            while j < n and kb[key_start[ref] + j] == kb[key_start[i] + j]:
                j += 1
            common = j
    return common


@numba.njit(cache=True, nogil=True)
def _below(kb: np.ndarray, at: int, length: int, bound: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Whether key kb[at:at+length] sorts before ``bound``."""
    n = length if length < bound.shape[0] else bound.shape[0]
    for i in range(n):
        x = kb[at + i]
        y = bound[i]
        if x != y:
            return x < y
    return length < bound.shape[0]


@numba.njit(cache=True, nogil=True)
def _first_not_below(
    kb: np.ndarray, key_start: np.ndarray, key_len: np.ndarray, lo: int, hi: int, bound: np.ndarray
) -> int:  # pragma: no cover - compiled
    while lo < hi:
        mid = (lo + hi) // 2
        if _below(kb, key_start[mid], key_len[mid], bound):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _bounds(
    kb: np.ndarray,
    key_start: np.ndarray,
    key_len: np.ndarray,
    run_begin: np.ndarray,
    run_end: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    has_upper: bool,
) -> None:  # pragma: no cover
    for r in range(run_begin.shape[0]):
        begin = _first_not_below(kb, key_start, key_len, run_begin[r], run_end[r], lower)
        end = _first_not_below(kb, key_start, key_len, begin, run_end[r], upper) if has_upper else run_end[r]
        run_begin[r] = begin
        run_end[r] = end


class Runs:
    """The decoded data blocks of several SST files, each file one sorted run, in flat arrays."""

    def __init__(self, runs: list[list]) -> None:
        keys, key_start, key_len, seq, vtype, values, value_start, value_len = ([] for _ in range(8))
        begin, end = [], []
        key_base = value_base = count = 0
        for blocks in runs:
            begin.append(count)
            for block in blocks:
                keys.append(block.keys)
                values.append(block.data)
                key_start.append(block.key_start + key_base)
                value_start.append(block.value_start + value_base)
                key_len.append(block.key_len)
                value_len.append(block.value_len)
                seq.append(block.seq)
                vtype.append(block.vtype)
                key_base += block.keys.shape[0]
                value_base += block.data.shape[0]
                count += len(block)
            end.append(count)

        def joined(parts: list[np.ndarray], dtype: type[np.generic]) -> np.ndarray:
            return np.concatenate(parts).astype(dtype, copy=False) if parts else np.empty(0, dtype=dtype)

        self.keys = joined(keys, np.uint8)
        # The decoded blocks stay apart: resolved() copies them once, into the buffer it returns.
        self.value_parts = values
        self.values_size = value_base
        self._values: np.ndarray | None = None
        self.key_start = joined(key_start, np.int64)
        self.key_len = joined(key_len, np.int64)
        self.value_start = joined(value_start, np.int64)
        self.value_len = joined(value_len, np.int64)
        self.seq = joined(seq, np.uint64)
        self.vtype = joined(vtype, np.uint8)
        self.begin = np.array(begin, dtype=np.int64)
        self.end = np.array(end, dtype=np.int64)

    @property
    def values(self) -> np.ndarray:
        """The decoded blocks back to back (``value_start`` indexes them)."""
        if self._values is None:
            self._values = np.concatenate(self.value_parts) if self.value_parts else np.empty(0, dtype=np.uint8)
        return self._values

    def restrict(self, lower: bytes, upper: bytes | None) -> None:
        """Keeps each run's entries with a user key in [lower, upper)."""
        _bounds(
            self.keys,
            self.key_start,
            self.key_len,
            self.begin,
            self.end,
            np.frombuffer(lower, dtype=np.uint8),
            np.frombuffer(upper or b"\0", dtype=np.uint8),
            upper is not None,
        )

    def resolved(self) -> tuple[np.ndarray, ...] | None:
        """The live entries, in key order, as (buffer, key at, key length, value at, value length):
        positions into one buffer holding the decoded keys, the decoded values and the values merge
        operands combine into. None when keys are too long for the sorted path (see ``MAX_SORT_WORDS``)."""
        idx = _live_indexes(self.begin, self.end)
        longest, merges = _live_sizes(
            idx,
            self.key_start,
            self.key_len,
            self.value_start,
            self.value_len,
            self.vtype,
            self.keys.shape[0],
            self.values_size,
        )
        if longest < 0:
            raise MergeFailure(MERGE_OUT_OF_BOUNDS, -1)
        if idx.shape[0] == 0:
            return np.empty(0, dtype=np.uint8), *(np.empty(0, dtype=np.int64) for _ in range(4))
        skip = _common_prefix(self.keys, self.key_start, self.key_len, self.begin, self.end)
        words = max(1, (longest - skip + 7) // 8)
        if words > MAX_SORT_WORDS:
            return None
        heads = np.empty((idx.shape[0], words), dtype=np.uint64)
        _heads_of(self.keys, self.key_start, self.key_len, idx, skip, heads)
        run_order = _disjoint_order(self.keys, self.key_start, self.key_len, self.begin, self.end)
        if run_order is not None:
            # Files whose key ranges do not meet (compacted levels) are already in order.
            lengths = np.maximum(self.end - self.begin, 0)
            starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))  # each run's place in idx
            order = np.concatenate([np.arange(starts[r], starts[r] + lengths[r]) for r in run_order])
        else:
            # Each file is a sorted run: a compiled merge of the runs by (the key as big-endian
            # words, its length, the sequence number descending: newest first) orders the
            # versions as RocksDB does, in n log(files) comparisons (a sort took n log n).
            order = _merge_runs(heads, self.key_len, self.seq, idx, np.maximum(self.end - self.begin, 0))
        ordered = idx[order]
        key_base = 0
        value_base = self.keys.shape[0]
        extra_base = value_base + self.values_size
        # merge operands (list state) are joined into ``extra``; without any it stays empty
        extra = np.empty(int(self.value_len[ordered].sum()) + ordered.shape[0] if merges else 0, dtype=np.uint8)
        positions = [np.empty(ordered.shape[0], dtype=np.int64) for _ in range(4)]
        count, extra_used, error, at = _resolve(
            ordered,
            heads[order],
            self.key_start,
            self.key_len,
            self.vtype,
            self.values if merges else extra,
            self.value_start,
            self.value_len,
            key_base,
            value_base,
            extra_base,
            extra,
            *positions,
        )
        if error != MERGE_OK:
            raise MergeFailure(error, int(self.vtype[at]) if at >= 0 else -1)
        buffer = np.concatenate((self.keys, *self.value_parts, extra[:extra_used]))
        return buffer, *(p[:count] for p in positions)


def _disjoint_order(
    keys: np.ndarray, key_start: np.ndarray, key_len: np.ndarray, begin: np.ndarray, end: np.ndarray
) -> list[int] | None:
    """The runs (files) in key order when no two hold a common user key range, else None."""
    spans = []
    for r in range(begin.shape[0]):
        if end[r] > begin[r]:
            first, last = begin[r], end[r] - 1
            spans.append(
                (
                    keys[key_start[first] : key_start[first] + key_len[first]].tobytes(),
                    keys[key_start[last] : key_start[last] + key_len[last]].tobytes(),
                    r,
                )
            )
    spans.sort()
    if any(spans[i][0] <= spans[i - 1][1] for i in range(1, len(spans))):
        return None
    return [r for _, _, r in spans]


class MergeFailure(Exception):
    """The merge met an entry it cannot take: ``error`` (MERGE_ERRORS) and the entry's value type."""

    def __init__(self, error: int, value_type: int) -> None:
        super().__init__(MERGE_ERRORS[error])
        self.error = error
        self.value_type = value_type


MAX_SORT_WORDS = 64  # keys up to 512 bytes after their shared prefix are sorted as fixed-width records


@numba.njit(cache=True, nogil=True)
def _live_indexes(run_begin: np.ndarray, run_end: np.ndarray) -> np.ndarray:  # pragma: no cover - compiled
    total = 0
    for r in range(run_begin.shape[0]):
        total += max(0, run_end[r] - run_begin[r])
    out = np.empty(total, dtype=np.int64)
    n = 0
    for r in range(run_begin.shape[0]):
        for i in range(run_begin[r], run_end[r]):
            out[n] = i
            n += 1
    return out


@numba.njit(cache=True, nogil=True)
def _heads_of(
    kb: np.ndarray, key_start: np.ndarray, key_len: np.ndarray, idx: np.ndarray, skip: int, heads: np.ndarray
) -> None:  # pragma: no cover - compiled
    words = heads.shape[1]
    for row in range(idx.shape[0]):
        i = idx[row]
        at = key_start[i] + skip
        left = key_len[i] - skip
        for w in range(words):
            value = np.uint64(0)
            for j in range(8):
                k = 8 * w + j
                value = (value << np.uint64(8)) | (np.uint64(kb[at + k]) if k < left else np.uint64(0))
            heads[row, w] = value


@numba.njit(cache=True, nogil=True)
def _live_sizes(
    idx: np.ndarray,
    key_start: np.ndarray,
    key_len: np.ndarray,
    value_start: np.ndarray,
    value_len: np.ndarray,
    vtype: np.ndarray,
    keys_size: int,
    values_size: int,
) -> tuple[int, bool]:  # pragma: no cover
    """(longest key, whether any is a merge operand) of the entries ``idx``; (-1, False) when
    one lies outside its decoded arrays."""
    longest = 0
    merges = False
    for i in idx:
        if (
            key_start[i] < 0
            or key_start[i] + key_len[i] > keys_size
            or value_start[i] < 0
            or (value_start[i] + value_len[i] > values_size)
        ):
            return -1, False
        longest = max(longest, key_len[i])
        merges = merges or vtype[i] == TYPE_MERGE
    return longest, merges


@numba.njit(cache=True, nogil=True)
def _before(
    heads: np.ndarray, key_len: np.ndarray, seq: np.ndarray, idx: np.ndarray, a: int, b: int
) -> bool:  # pragma: no cover - compiled
    """Whether row a (entry idx[a]) sorts before row b in internal-key order."""
    for w in range(heads.shape[1]):
        x = heads[a, w]
        y = heads[b, w]
        if x != y:
            return x < y
    la = key_len[idx[a]]
    lb = key_len[idx[b]]
    if la != lb:
        return la < lb
    return seq[idx[a]] > seq[idx[b]]


@numba.njit(cache=True, nogil=True)
def _merge_runs(
    heads: np.ndarray, key_len: np.ndarray, seq: np.ndarray, idx: np.ndarray, run_lengths: np.ndarray
) -> np.ndarray:  # pragma: no cover - compiled
    """The order of rows 0..n-1 (laid out as consecutive sorted runs of ``run_lengths``) in
    internal-key order: adjacent runs merged pairwise until one is left; stable (on a tie the
    earlier run's row comes first)."""
    n = heads.shape[0]
    src = np.arange(n)
    dst = np.empty(n, dtype=np.int64)
    bounds = np.empty(run_lengths.shape[0] + 1, dtype=np.int64)
    runs = 0
    bounds[0] = 0
    for r in range(run_lengths.shape[0]):
        if run_lengths[r] > 0:
            bounds[runs + 1] = bounds[runs] + run_lengths[r]
            runs += 1
    while runs > 1:
        merged = 0
        for p in range(0, runs, 2):
            lo = bounds[p]
            if p + 1 == runs:  # the odd run out is copied as it is
                for k in range(lo, bounds[p + 1]):
                    dst[k] = src[k]
            else:
                i = lo
                mid = bounds[p + 1]
                j = mid
                hi = bounds[p + 2]
                k = lo
                while i < mid and j < hi:
                    if _before(heads, key_len, seq, idx, src[j], src[i]):
                        dst[k] = src[j]
                        j += 1
                    else:
                        dst[k] = src[i]
                        i += 1
                    k += 1
                while i < mid:
                    dst[k] = src[i]
                    i += 1
                    k += 1
                while j < hi:
                    dst[k] = src[j]
                    j += 1
                    k += 1
            bounds[merged] = lo
            merged += 1
        bounds[merged] = bounds[runs]
        runs = merged
        src, dst = dst, src
    return src


@numba.njit(cache=True, nogil=True)
def _same_key(
    heads: np.ndarray, key_len: np.ndarray, ordered: np.ndarray, a: int, b: int
) -> bool:  # pragma: no cover - compiled
    """Whether rows a and b (entries ordered[a], ordered[b]) have the same user key."""
    if key_len[ordered[a]] != key_len[ordered[b]]:
        return False
    for w in range(heads.shape[1]):
        if heads[a, w] != heads[b, w]:
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _resolve(
    ordered: np.ndarray,
    heads: np.ndarray,
    key_start: np.ndarray,
    key_len: np.ndarray,
    vtype: np.ndarray,
    vb: np.ndarray,
    value_start: np.ndarray,
    value_len: np.ndarray,
    key_base: int,
    value_base: int,
    extra_base: int,
    extra: np.ndarray,
    key_at: np.ndarray,
    key_ln: np.ndarray,
    value_at: np.ndarray,
    value_ln: np.ndarray,
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    """Newest version of each key (versions sorted newest first): a Put's value, nothing for a
    deletion, merge operands over the version below them joined by ','. Returns (entries,
    extra bytes used, error code, offending entry)."""
    n = ordered.shape[0]
    count = 0
    used = 0
    i = 0
    while i < n:
        j = i + 1
        while j < n and _same_key(heads, key_len, ordered, i, j):
            j += 1
        m = i  # the newest version that is not a merge operand
        while m < j and vtype[ordered[m]] == TYPE_MERGE:
            m += 1
        below = -1  # the Put under the operands, if any
        if m < j:
            t = vtype[ordered[m]]
            if t == TYPE_VALUE:
                below = ordered[m]
            elif not (t == TYPE_DELETION or t == TYPE_SINGLE_DELETION or t == TYPE_DELETION_WITH_TIMESTAMP):
                return count, used, MERGE_UNSUPPORTED_TYPE, ordered[m]
        key = ordered[i]
        if m == i and below < 0:
            i = j  # deleted
            continue
        key_at[count] = key_base + key_start[key]
        key_ln[count] = key_len[key]
        if m == i:
            value_at[count] = value_base + value_start[below]
            value_ln[count] = value_len[below]
        else:
            start = used
            first = True
            if below >= 0:
                if used + value_len[below] > extra.shape[0]:
                    return count, used, MERGE_OUT_OF_BOUNDS, below
                for k in range(value_len[below]):
                    extra[used + k] = vb[value_start[below] + k]
                used += value_len[below]
                first = False
            for t in range(m - 1, i - 1, -1):  # operands oldest first
                op = ordered[t]
                if used + value_len[op] + 1 > extra.shape[0]:
                    return count, used, MERGE_OUT_OF_BOUNDS, op
                if not first:
                    extra[used] = LIST_DELIMITER
                    used += 1
                first = False
                for k in range(value_len[op]):
                    extra[used + k] = vb[value_start[op] + k]
                used += value_len[op]
            value_at[count] = extra_base + start
            value_ln[count] = used - start
        count += 1
        i = j
    return count, used, MERGE_OK, -1
