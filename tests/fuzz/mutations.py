"""Seeded single mutations of the fixture savepoints, each spelled as one replayable line.

A case is ``FIXTURE/FILE@OFFSET:KIND[:ARG]``:

    flip:B       flip bit B (0-7) of the byte at OFFSET
    set:HH       overwrite the byte at OFFSET with 0xHH
    len:HHHHHHHH overwrite 4 bytes at OFFSET with a huge big-endian length (0x7FFFFFFF, ...)
    truncate     cut the file at OFFSET
    insert:HEX   insert the bytes HEX at OFFSET
    delete:N     delete N bytes at OFFSET

Case ``i`` of seed ``s`` depends on ``(s, i)`` only, so a longer campaign extends a shorter one.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from tests.fixtures.expected import CASES_DIR

METADATA = "_metadata"
# The kind of the unmutated baseline case (``FIXTURE/_metadata@0:none``).
BASELINE = "none"
SPECIAL_BYTES = (0x00, 0xFF, 0x7F, 0x80)
HUGE_LENGTHS = (0x7FFFFFFF, 0xFFFFFFFF, 0x40000000)
# The pseudo-fixture whose cases make a worker crash, hang, exhaust memory or raise on purpose, so
# the harness is shown to tell those outcomes apart.
SELF_TEST = "__selftest__"
# Relative weights of the mutation kinds.
KIND_WEIGHTS = {"flip": 25, "set": 25, "len": 15, "truncate": 8, "insert": 12, "delete": 15}
# State files get this share of the cases of a fixture that has any (the rest go to _metadata,
# which also holds inline state).
STATE_FILE_SHARE = 0.5


@dataclass(frozen=True)
class Case:
    fixture: str
    file: str
    offset: int
    kind: str
    arg: str = ""

    @property
    def spec(self) -> str:
        suffix = f":{self.arg}" if self.arg else ""
        return f"{self.fixture}/{self.file}@{self.offset}:{self.kind}{suffix}"

    @classmethod
    def parse(cls, spec: str) -> Case:
        try:
            target, mutation = spec.strip().split("@", 1)
            fixture, file = target.split("/", 1)
            offset, _, rest = mutation.partition(":")
            kind, _, arg = rest.partition(":")
            case = cls(fixture, file, int(offset), kind, arg)
        except ValueError:
            raise ValueError(f"not a fuzz case: {spec!r} (expected FIXTURE/FILE@OFFSET:KIND[:ARG])") from None
        if kind not in KIND_WEIGHTS and kind != BASELINE and fixture != SELF_TEST:
            raise ValueError(f"unknown mutation kind {kind!r} in {spec!r}; known: {', '.join(KIND_WEIGHTS)}")
        return case

    def apply(self, data: bytes) -> bytes:
        """The mutated bytes of the file."""
        at, arg = self.offset, self.arg
        if not 0 <= at <= len(data):
            raise ValueError(f"offset {at} outside the {len(data)}-byte file of {self.spec}")
        if self.kind == BASELINE:
            return data
        if self.kind == "flip":
            return data[:at] + bytes([data[at] ^ (1 << int(arg))]) + data[at + 1 :]
        if self.kind == "set":
            return data[:at] + bytes.fromhex(arg) + data[at + 1 :]
        if self.kind == "len":
            return data[:at] + bytes.fromhex(arg) + data[at + 4 :]
        if self.kind == "truncate":
            return data[:at]
        if self.kind == "insert":
            return data[:at] + bytes.fromhex(arg) + data[at:]
        if self.kind == "delete":
            return data[:at] + data[at + int(arg) :]
        raise ValueError(f"unknown mutation kind {self.kind!r}")


def fixture_names(cases_dir: Path = CASES_DIR) -> list[str]:
    """Every fixture case directory; one without a savepoint is an error, never skipped.

    Successive cases (tests/fixtures/README.md) are not fuzzed here: their snapshots are a job
    directory of checkpoints and several savepoints, not one ``savepoint/`` this harness copies."""
    names = sorted(d.name for d in cases_dir.iterdir() if d.is_dir() and not _successive(d))
    missing = [n for n in names if not (cases_dir / n / "savepoint" / METADATA).is_file()]
    if missing:
        raise FileNotFoundError(f"fixture cases without savepoint/_metadata: {', '.join(missing)}")
    if not names:
        raise FileNotFoundError(f"no fixture cases under {cases_dir}")
    return names


def _successive(case_dir: Path) -> bool:
    expected = case_dir / "expected.json"
    return expected.is_file() and json.loads(expected.read_text()).get("snapshot") == "successive"


def savepoint_files(fixture: str, cases_dir: Path = CASES_DIR) -> dict[str, int]:
    """File name -> size of every file of a fixture's savepoint directory."""
    directory = cases_dir / fixture / "savepoint"
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}


def generate(seed: int, count: int, cases_dir: Path = CASES_DIR) -> list[Case]:
    """``count`` cases, round-robin over every fixture, each drawn from its own ``(seed, index)``."""
    fixtures = fixture_names(cases_dir)
    files = {f: savepoint_files(f, cases_dir) for f in fixtures}
    kinds, weights = zip(*KIND_WEIGHTS.items())
    cases = []
    for index in range(count):
        rng = random.Random(f"{seed}:{index}")
        fixture = fixtures[index % len(fixtures)]
        sizes = files[fixture]
        state_files = [name for name in sizes if name != METADATA and sizes[name] > 0]
        file = rng.choice(state_files) if state_files and rng.random() < STATE_FILE_SHARE else METADATA
        cases.append(_draw(rng, fixture, file, sizes[file], rng.choices(kinds, weights)[0]))
    return cases


def _draw(rng: random.Random, fixture: str, file: str, size: int, kind: str) -> Case:
    if kind == "flip":
        return Case(fixture, file, rng.randrange(size), kind, str(rng.randrange(8)))
    if kind == "set":
        value = rng.choice(SPECIAL_BYTES + (None,))
        value = rng.randrange(256) if value is None else value
        return Case(fixture, file, rng.randrange(size), kind, f"{value:02x}")
    if kind == "len" and size >= 4:
        return Case(fixture, file, rng.randrange(size - 3), kind, f"{rng.choice(HUGE_LENGTHS):08x}")
    if kind == "insert":
        return Case(fixture, file, rng.randrange(size + 1), kind, rng.randbytes(rng.randint(1, 4)).hex())
    if kind == "delete":
        at = rng.randrange(size)
        return Case(fixture, file, at, kind, str(min(rng.randint(1, 4), size - at)))
    return Case(fixture, file, rng.randrange(size), "truncate")
