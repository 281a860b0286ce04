"""The live view of one RocksDB column family from its SST files, as RocksDB's own iterator
returns it: per user key the newest version wins, deletions and range deletions hide older
versions, merge operands are combined (oldest first) with the column family's merge operator.

Streams with bounded memory: one decoded data block per file at a time, merged in internal-key
order (``merged_chunks``); files whose key ranges do not overlap are simply read one after another.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, cast

import numpy as np

from statecat.readers.backends.sst.format import (
    DELETION_TYPES,
    TYPE_MERGE,
    TYPE_VALUE,
    VALUE_TYPE_NAMES,
)
from statecat.readers.backends.sst.table import SstFile, block_entries, block_slice
from statecat.statemeta.errors import FormatError, UnsupportedError

if TYPE_CHECKING:
    from statecat.readers.backends.sst.block import DecodedBlock

MergeFunction = Callable[[bytes | None, list[bytes]], bytes]


def concatenate_with_delimiter(delimiter: bytes) -> MergeFunction:
    """RocksDB's string-append merge (FRocksDB's "stringappendtest", Flink's list state): the base
    value (if any) and the operands, oldest first, joined by ``delimiter``."""

    def merge(base: bytes | None, operands: list[bytes]) -> bytes:
        return delimiter.join(operands if base is None else [base, *operands])

    merge.__qualname__ = f"concatenate_with_delimiter({delimiter!r})"
    return merge


# Flink's list state: elements joined by ','.
FLINK_LIST_MERGE = concatenate_with_delimiter(b",")


class RangeTombstones:
    """The newest range deletion covering each user key: the tombstones cut into disjoint
    fragments at every start and end, each with the largest covering sequence number."""

    def __init__(self, tombstones: Iterable[tuple[bytes, bytes, int]]) -> None:
        live = sorted((s, e, q) for s, e, q in tombstones if s < e)
        self.bounds = sorted({s for s, _, _ in live} | {e for _, e, _ in live})
        self.newest: list[int] = []
        active: list[tuple[int, bytes]] = []  # (-seq, end), stale ones dropped when on top
        i = 0
        for bound in self.bounds:
            while i < len(live) and live[i][0] <= bound:
                heapq.heappush(active, (-live[i][2], live[i][1]))
                i += 1
            while active and active[0][1] <= bound:
                heapq.heappop(active)
            self.newest.append(-active[0][0] if active else 0)

    def __bool__(self) -> bool:
        return bool(self.bounds)

    def covering_seq(self, key: bytes) -> int:
        """The largest sequence number of a range deletion covering ``key`` (0: none); versions of
        ``key`` older than it are deleted."""
        i = bisect.bisect_right(self.bounds, key) - 1
        return self.newest[i] if i >= 0 else 0


class ColumnFamilyView:
    """Live (user key, value) pairs of a column family stored in ``files`` (all its live SST
    files, any levels); ``merge`` combines merge operands (default: Flink's list merge, ',')."""

    def __init__(self, files: list[SstFile], merge: MergeFunction = FLINK_LIST_MERGE) -> None:
        self.files = list(files)
        self.merge = merge
        names = {f.column_family for f in self.files if f.column_family is not None}
        if len(names) > 1:
            raise FormatError(
                f"expected the SST files of one column family, got files of {sorted(names)}",
                file=", ".join(f.display for f in self.files),
                hint="Group a snapshot's SST files by their rocksdb.column.family.name property first",
            )
        unknown = [f.display for f in self.files if f.global_seqno_unknown]
        if unknown and len(self.files) > 1:
            raise UnsupportedError(
                "ingested SST file (made by SstFileWriter) whose sequence number is kept only in the DB's "
                "MANIFEST: its versions cannot be ordered against the other files'",
                file=", ".join(unknown),
                hint="Open it with SstFile(..., largest_seqno=<the file's largest seqno in the MANIFEST>)",
            )
        self._tombstones: RangeTombstones | None = None
        self._order: list | None = None

    def range_tombstones(self) -> RangeTombstones:
        if self._tombstones is None:
            self._tombstones = RangeTombstones(t for f in self.files for t in f.range_tombstones())
        return self._tombstones

    def versions(
        self, lower: bytes | None = None, upper: bytes | None = None
    ) -> Iterator[tuple[bytes, int, int, bytes]]:
        """Every stored version (user key, seq, type, value) in [lower, upper) across the files,
        in internal-key order (user key ascending, newest first)."""
        if len(self.files) == 1:
            return self.files[0].entries(lower, upper)
        ordered = self._disjoint_order()
        if ordered is not None:
            return itertools.chain.from_iterable(f.entries(lower, upper) for f in ordered)
        return (
            (key, -neg_seq, vtype, value)
            for chunk in merged_chunks(self.files, lower, upper)
            for key, neg_seq, vtype, value in chunk
        )

    def _disjoint_order(self) -> list[SstFile] | None:
        """The files in key order when their key ranges do not overlap (then no k-way merge is
        needed), else None. Costs the first and last data block of each file, once."""
        if self._order is None:
            self._order = [self._find_disjoint_order()]
        return self._order[0]

    def _find_disjoint_order(self) -> list[SstFile] | None:
        ranges = []
        for f in self.files:
            r = f.key_range()
            if r is not None:
                ranges.append((r, f))
        ranges.sort(key=lambda item: item[0])
        for (a, _), (b, _) in zip(ranges, ranges[1:]):
            if a[1] >= b[0]:
                return None
        return [f for _, f in ranges]

    def entries(self, lower: bytes | None = None, upper: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The live (user key, value) pairs with user keys in [lower, upper), ascending."""
        tombstones = self.range_tombstones()
        resolver = _Resolver(tombstones.covering_seq if tombstones else None, self.merge, self.files)
        ordered = self.files if len(self.files) == 1 else self._disjoint_order()
        if ordered is not None:
            blocks = (b for f in ordered for b in f.data_blocks(lower, upper))
            return resolver.blocks(blocks, lower, upper)
        return resolver.chunks(merged_chunks(self.files, lower, upper))


def merged_chunks(files: list[SstFile], lower: bytes | None, upper: bytes | None) -> Iterator[list[tuple]]:
    """The (user key, -seq, type, value) rows of overlapping files in internal-key order, as
    sorted lists: holding one decoded data block per file, every row below the smallest last key
    of the files' current blocks is final, so those rows are sorted together (in C: timsort
    merges the per-file sorted runs) and the exhausted blocks are refilled."""
    blocks = [f.data_blocks(lower, upper) for f in files]
    pending: dict[int, list[tuple]] = {}
    final: set[int] = set()

    def refill(i: int, rest: list[tuple]) -> None:
        for block in blocks[i]:
            rows = block_entries(block, lower, upper, negate_seq=True)
            if rows:
                pending[i] = rest + rows if rest else rows
                return
        final.add(i)
        if rest:
            pending[i] = rest
        else:
            pending.pop(i, None)

    for i in range(len(files)):
        refill(i, [])
    while pending:
        open_lasts = [rows[-1][0] for i, rows in pending.items() if i not in final]
        if not open_lasts:
            rest = [row for rows in pending.values() for row in rows]
            rest.sort()
            yield rest
            return
        bound = min(open_lasts)
        runs = []
        for i, rows in list(pending.items()):
            cut = bisect.bisect_left(rows, bound, key=_row_key)
            if cut:
                runs.append(rows[:cut])
                pending[i] = rows = rows[cut:]
            if i not in final and (not rows or rows[-1][0] == bound):
                refill(i, rows)  # all its held rows are of ``bound``: more may follow in its next block
            elif not rows:
                del pending[i]
        if len(runs) == 1:
            yield runs[0]
        elif runs:
            merged = runs[0]
            for run in runs[1:]:
                merged.extend(run)  # runs are fresh slices: extending one copies nothing shared
            merged.sort()
            yield merged


def _row_key(row: tuple) -> bytes:
    return row[0]


class _Resolver:
    """Turns versions in internal-key order — (user key, -seq, type, value) rows — into live
    (user key, value) pairs. State carries across blocks/chunks: a key's versions may span them."""

    def __init__(self, covering: Callable[[bytes], int] | None, merge: MergeFunction, files: list[SstFile]) -> None:
        self.covering = covering
        self.merge = merge
        self.files = files
        self.current: bytes | None = None
        self.settled = False  # the current key's value is decided: skip its older versions
        self.operands: list[bytes] = []
        self.cover = 0  # -(seq of the newest range deletion covering the current key)

    def blocks(
        self, blocks: Iterable[DecodedBlock], lower: bytes | None, upper: bytes | None
    ) -> Iterator[tuple[bytes, bytes]]:
        for block in blocks:
            keys, start, stop = block_slice(block, lower, upper)
            if start == stop:
                continue
            values = block.value_list()
            if start or stop < len(keys):
                keys, values = keys[start:stop], values[start:stop]
                vtypes = block.vtype[start:stop]
            else:
                vtypes = block.vtype
            # Common case, a block of distinct keys all plain puts: its pairs as they are.
            if (
                self.covering is None
                and keys[0] != self.current
                and bool((vtypes == TYPE_VALUE).all())
                and len(set(keys)) == len(keys)
            ):
                yield from self.finish()
                self.current = keys[-1]
                self.settled = True
                yield from zip(keys, values)
            else:
                seqs = (-block.seq[start:stop].astype(np.int64)).tolist()
                yield from self.rows(zip(keys, seqs, vtypes.tolist(), values))
        yield from self.finish()

    def chunks(self, chunks: Iterable[list[tuple]]) -> Iterator[tuple[bytes, bytes]]:
        for chunk in chunks:
            yield from self.rows(chunk)
        yield from self.finish()

    def finish(self) -> Iterator[tuple[bytes, bytes]]:
        if self.operands:
            yield cast(bytes, self.current), self.merge(None, self.operands[::-1])  # operands pending: current is a key
            self.operands = []
        self.settled = True

    def rows(self, rows: Iterable[tuple[bytes, int, int, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        covering, merge = self.covering, self.merge
        current, settled, operands, cover = self.current, self.settled, self.operands, self.cover
        for key, neg_seq, vtype, value in rows:
            if key != current:
                if operands:
                    # Operands pending: current is a key (per key, so no cast() call).
                    yield current, merge(None, operands[::-1])  # type: ignore[misc]
                    operands = []
                current = key
                settled = False
                cover = -covering(key) if covering is not None else 0
            elif settled:
                continue
            if neg_seq > cover:  # older than a range deletion covering the key
                settled = True
                if operands:
                    yield key, merge(None, operands[::-1])
                    operands = []
            elif vtype == TYPE_VALUE:
                settled = True
                if operands:
                    yield key, merge(value, operands[::-1])
                    operands = []
                else:
                    yield key, value
            elif vtype == TYPE_MERGE:
                operands.append(value)
            elif vtype in DELETION_TYPES:
                settled = True
                if operands:
                    yield key, merge(None, operands[::-1])
                    operands = []
            else:
                name = VALUE_TYPE_NAMES.get(vtype, f"unknown type {vtype}")
                raise UnsupportedError(
                    f"SST entry of value type {name} (0x{vtype:02x}) for key {key.hex()} at seq {-neg_seq}; "
                    "statecat reads Value, Merge, Deletion, SingleDeletion and range deletions",
                    file=", ".join(f.display for f in self.files),
                    hint="Blob files (enable_blob_files) and wide columns are not read; Flink does not use them",
                )
        self.current, self.settled, self.operands, self.cover = current, settled, operands, cover
