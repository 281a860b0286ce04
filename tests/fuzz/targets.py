"""Fuzz targets that take bytes, for coverage-guided fuzzing (bench/fuzz_atheris.py), with seeds
cut out of the real fixture savepoints.

    metadata   a whole ``_metadata`` file, parsed by ``read_metadata``
    header     a keyed (first byte even) or operator (odd) state stream header, parsed by
               ``read_keyed_header`` / ``read_operator_header`` (with unknown-serializer recovery)
    snapshot   one top-level serializer snapshot, read by ``SnapshotReader.top_level``
    records    one key-group (or operator state element) of a real fixture state, decoded by that
               state's scanner record by record (the general decoders); byte 0 picks the state,
               bytes 1-2 the key-group
    columns    the same for the states the column-wise path covers, through the compiled walk and
               ``ColumnExtractor``

Each target writes its bytes to a scratch file and reads them through statecat's own storage
layer, as a damaged savepoint would be read. Returning or raising a StatecatError is expected;
any other exception is a finding. Decoded batches must validate fully and convert to Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from statecat.readers.scans.scan import scanner_for
from statecat.statemeta.binary import DataInput
from statecat.statemeta.errors import StatecatError
from statecat.statemeta.files.headers import header_end, read_keyed_header, read_operator_header, read_stream_bytes
from statecat.statemeta.files.metadata import FileStream, KeyGroupsHandle, OperatorStreamHandle, read_metadata
from statecat.statemeta.files.snapshots import SnapshotReader
from statecat.statemeta.files.storage import METADATA_FILE, open_storage
from statecat.statemeta.model import KeyedLocation, load_state_meta
from tests.fixtures.expected import CASES_DIR
from tests.fuzz.mutations import fixture_names

TARGETS = ("metadata", "header", "snapshot", "records", "columns")
# Seeds per state location: a few key-groups or elements each are enough to start from every layout.
SEEDS_PER_LOCATION = 3
MAX_STATES = 256  # one selector byte


@dataclasses.dataclass(frozen=True)
class StateEntry:
    """A real fixture state's scanner, bound to a scratch storage, and one of its locations to imitate."""

    label: str
    scanner: object
    location: object  # KeyedLocation | OperatorLocation

    @property
    def keyed(self) -> bool:
        return isinstance(self.location, KeyedLocation)


class Targets:
    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.storages = {}
        for name in ("metadata", "header", "records", "columns"):
            directory = scratch / name
            directory.mkdir(parents=True, exist_ok=True)
            (directory / METADATA_FILE).write_bytes(b"")
            self.storages[name] = open_storage(str(directory))
        self.seeds: dict[str, list[bytes]] = {name: [] for name in TARGETS}
        self.records_states: list[StateEntry] = []
        self.columns_states: list[StateEntry] = []
        for fixture in fixture_names():
            self._collect(fixture)

    def function(self, name: str) -> Callable[[bytes], object]:
        return getattr(self, f"fuzz_{name}")

    # -- targets

    def fuzz_metadata(self, data: bytes):
        storage = self._write("metadata", data)
        return read_metadata(storage)

    def fuzz_header(self, data: bytes):
        if not data:
            return None
        storage = self._write("header", data[1:])
        handle = FileStream(storage.metadata_path, len(data) - 1, "relative")
        read = read_operator_header if data[0] & 1 else read_keyed_header
        return read(storage, handle, [len(data) - 1])

    def fuzz_snapshot(self, data: bytes):
        return SnapshotReader(DataInput.of_bytes(data, "snapshot"), data, 0).top_level()

    def fuzz_records(self, data: bytes):
        return self._scan("records", self.records_states, data)

    def fuzz_columns(self, data: bytes):
        return self._scan("columns", self.columns_states, data)

    # -- helpers

    def _write(self, name: str, data: bytes):
        storage = self.storages[name]
        Path(storage.metadata_path).write_bytes(data)
        return storage

    def _scan(self, name: str, states: list[StateEntry], data: bytes):
        if len(data) < 3 or not states:
            return None
        entry = states[data[0] % len(states)]
        # One pad byte: a key-group or element at offset 0 would read as "empty".
        storage = self._write(name, b"\0" + data[3:])
        stream = FileStream(storage.metadata_path, len(data) - 2, "relative")
        if entry.keyed:
            location = dataclasses.replace(
                entry.location, stream=stream, offsets=(1,), start_key_group=int.from_bytes(data[1:3], "big")
            )
        else:
            location = dataclasses.replace(entry.location, stream=stream, offsets=(1,), end=len(data) - 2)
        rows = 0
        for batch in entry.scanner.batches([location]):
            batch.validate(full=True)
            rows += len(batch.to_pylist())
        return rows

    def _collect(self, fixture: str) -> None:
        path = str(CASES_DIR / fixture / "savepoint")
        self.seeds["metadata"].append((Path(path) / METADATA_FILE).read_bytes())
        metadata = read_metadata(path)
        for operator in metadata.operators:
            for subtask in operator.subtasks:
                for handle in (subtask.managed_keyed, subtask.managed_operator):
                    if isinstance(handle, KeyGroupsHandle) and handle.kind == "savepoint":
                        self._header_seeds(metadata.storage, handle.stream, list(handle.offsets), keyed=True)
                    elif isinstance(handle, OperatorStreamHandle):
                        offsets = [o for entry in handle.entries for o in entry.offsets]
                        self._header_seeds(metadata.storage, handle.stream, offsets, keyed=False)
        meta = load_state_meta(path, use_state_info=False)
        for operator, state in meta.states():
            for target, states in (("records", self.records_states), ("columns", self.columns_states)):
                if len(states) >= MAX_STATES:
                    continue
                scratch_meta = dataclasses.replace(meta, storage=self.storages[target])
                try:
                    scanner = scanner_for(scratch_meta, operator, state)
                except StatecatError:
                    continue  # a state statecat reports unsupported has no decoder to fuzz
                if target == "records":
                    scanner.fast = None
                elif getattr(scanner, "fast", None) is None:
                    continue
                for location in state.locations:
                    if getattr(location, "layout", "canonical") != "canonical":
                        # A heap checkpoint's key-group is read with the other states of its stream,
                        # which a lone re-homed key-group lacks; the mutation fuzzer covers that layout.
                        continue
                    seeds = self._location_seeds(meta.storage, location, len(states))
                    if seeds and len(states) < MAX_STATES:
                        states.append(StateEntry(f"{fixture} {operator.label}/{state.name}", scanner, location))
                        self.seeds[target].extend(seeds)

    def _header_seeds(self, storage, stream, offsets: list[int], *, keyed: bool) -> None:
        data, _, _ = read_stream_bytes(storage, stream, 0, header_end(stream, offsets))
        self.seeds["header"].append(bytes([0 if keyed else 1]) + data)
        # The snapshot seeds: every top-level serializer snapshot this header holds, cut out exactly.
        spans = []
        original = SnapshotReader.top_level

        def recording(reader):
            start = reader.data.offset
            result = original(reader)
            spans.append((start - reader._base, reader.data.offset - reader._base))
            return result

        SnapshotReader.top_level = recording
        try:
            (read_keyed_header if keyed else read_operator_header)(storage, stream, offsets)
        finally:
            SnapshotReader.top_level = original
        self.seeds["snapshot"].extend(data[start:end] for start, end in spans)

    def _location_seeds(self, storage, location, index: int) -> list[bytes]:
        """The raw bytes (compressed if the stream is) of a few key-groups or elements of one location."""
        keyed = isinstance(location, KeyedLocation)
        offsets = list(location.offsets)
        starts = sorted(o for o in offsets if o > 0)
        seeds = []
        for i, offset in enumerate(offsets):
            if offset <= 0 or len(seeds) >= SEEDS_PER_LOCATION:
                continue
            later = [s for s in starts if s > offset]
            end = later[0] if later else (location.stream.size if keyed else location.end)
            data, _, _ = read_stream_bytes(storage, location.stream, offset, end - offset)
            key_group = location.start_key_group + i if keyed else 0
            seeds.append(bytes([index]) + key_group.to_bytes(2, "big") + data)
        return seeds
