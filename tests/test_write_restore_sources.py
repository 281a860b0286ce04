"""A FLIP-27 source split moved by statecat write, restored by real Flink: the poison record is skipped.

The fixture tests/fixtures/source_positions/filesource_2.3 (README there) is a savepoint of
tests/flink_jobs/source_positions.py taken with its FileSource reader mid-way through a.txt
(records_to_skip 855; b.txt pending in the enumerator, both paths processed) and its
NumberSequenceSource reader at [857, 19999]; the keyed counters say 855 lines and 857 numbers.
Restored (tests/fixtures/restore.py, kind SourcePositionsOutput), the job prints per record what
its counters see; it runs until File Count received exactly the rest of a.txt plus b.txt (REST
numRecordsIn) and the number pipeline has read its bounded split to the end (its vertex FINISHED),
then stops with a savepoint.

Ground truth is the job's input: the lines of the committed a.txt and b.txt, the number range of
expected.json and the counter values the README records, never statecat's reader.

The restored reader reopens its split, and the enumerator hands out b.txt, by the ABSOLUTE paths
the savepoint holds (the generator's deleted scratch directory, expected.json's
input_dir_at_generation): the test recreates that directory with the committed files for the run
and deletes it afterwards; the job monitors it as the original run did, so its enumerator lists
a.txt and b.txt and must know both as processed (were the processed paths lost, the files would
be read again and the exact counts overshoot).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pytest

from tests.fixtures.edits import write_savepoint
from tests.fixtures.restore import restore_and_continue

pytestmark = pytest.mark.live_flink

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "source_positions" / "filesource_2.3"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())
# What the savepoint's counters hold (README: "the counter says 855 lines", "857 numbers, max 856").
LINES_READ = 855  # of a.txt, in order: the FileSource reader resumes by skipping that many
NUMBERS_READ = 857  # 0..856: the number split resumes at 857
TIMEOUT = 120  # seconds the restored job waits for its input (the harness adds start-up and stop)

SKIP_POISON = "UPDATE file_src__sourcereaderstate SET value.file.records_to_skip = value.file.records_to_skip + 1"
JUMP_NUMBERS = (
    "UPDATE number_src__sourcereaderstate SET value.number_sequence.from_value = value.number_sequence.from_value + 100"
)


def _lines(name: str) -> list[str]:
    """The input file's lines as the text-line format emits them (no line terminator)."""
    data = (FIXTURE / "input" / name).read_bytes().decode("utf-8")
    assert data.endswith("\n") and "\r" not in data
    lines = data[:-1].split("\n")
    assert len(lines) == EXPECTED["files"][name]["lines"]
    return lines


@contextlib.contextmanager
def original_input():
    """The generator's input directory, recreated at its absolute path with the committed files
    for the block, deleted afterwards with the parents this made (only those). An existing directory
    is not touched: the test fails instead (another run of it, or files not ours)."""
    directory = Path(EXPECTED["input_dir_at_generation"])
    assert directory.is_absolute()
    created = directory
    while not created.parent.exists():
        created = created.parent
    if directory.exists():
        pytest.fail(f"{directory} exists already: the splits' files must be recreated by this test alone")
    directory.mkdir(parents=True)
    try:
        for name in EXPECTED["files"]:
            shutil.copyfile(FIXTURE / "input" / name, directory / name)
        yield directory
    finally:
        shutil.rmtree(created)


def _restore(savepoint: Path, file_records: int, backend: str | None = None):
    spec = {
        "job": "source_positions",
        "flink": EXPECTED["flink_version"],
        "parallelism": 1,
        "params": {"numbers": EXPECTED["numbers"]},
    }
    with original_input() as directory:
        spec["params"]["input"] = str(directory)
        out = restore_and_continue(
            spec,
            savepoint,
            [("file", file_records)],
            backend=backend,
            timeout=TIMEOUT,
            job_args=["--throttle-ms", "0"],
        )
    files = [(r["line"], r["count"]) for r in out if r["source"] == "file"]
    numbers = [(r["number"], r["count"], r["max"]) for r in out if r["source"] == "number"]
    assert len(files) + len(numbers) == len(out)
    return out, files, numbers


def _expected_files(first: int) -> list[tuple[str, int]]:
    """(line, count after it) from a.txt's 0-based line `first` on, then all of b.txt; the count
    continues from LINES_READ."""
    rest = _lines("a.txt")[first:] + _lines("b.txt")
    return [(line, LINES_READ + 1 + i) for i, line in enumerate(rest)]


def _expected_numbers(first: int) -> list[tuple[int, int, int]]:
    """(number, count, max) from `first` to the end of the range; the count continues from
    NUMBERS_READ."""
    return [(n, NUMBERS_READ + 1 + i, n) for i, n in enumerate(range(first, EXPECTED["numbers"]))]


def test_unedited_source_positions_resume_where_the_counters_stopped():
    a = _lines("a.txt")
    remaining = len(a) - LINES_READ + len(_lines("b.txt"))
    out, files, numbers = _restore(FIXTURE / "savepoint", remaining)
    # the first record read after the restore is line 856 of a.txt (1-based), counted as the 856th
    assert files[0] == (a[LINES_READ], LINES_READ + 1)
    assert files == _expected_files(LINES_READ)
    assert numbers == _expected_numbers(NUMBERS_READ)
    print(f"restore: {out.seconds:.1f}s, {len(out)} records")


@pytest.mark.parametrize("backend", [None, "rocksdb"])  # a canonical savepoint restores into either
def test_edited_file_split_skips_the_poison_record(tmp_path, backend):
    dst = tmp_path / "edited"
    write_savepoint(str(FIXTURE / "savepoint"), str(dst), sql=[SKIP_POISON, JUMP_NUMBERS])
    a = _lines("a.txt")
    poison = a[LINES_READ]  # line 856, the one the edit skips
    remaining = len(a) - LINES_READ - 1 + len(_lines("b.txt"))
    out, files, numbers = _restore(dst, remaining, backend)
    assert poison not in [line for line, _ in files]
    # line 857 comes first and the count continues from the counter's 855: it ends one lower
    assert files[0] == (a[LINES_READ + 1], LINES_READ + 1)
    assert files == _expected_files(LINES_READ + 1)
    assert files[-1][1] == len(a) + len(_lines("b.txt")) - 1
    # the number split starts 100 later; count and max continue from the counter's state
    assert numbers[0] == (NUMBERS_READ + 100, NUMBERS_READ + 1, NUMBERS_READ + 100)
    assert numbers == _expected_numbers(NUMBERS_READ + 100)
    print(f"restore ({backend or 'hashmap'}): {out.seconds:.1f}s, {len(out)} records")
