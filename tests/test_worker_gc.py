"""A Python worker freezes what its first read loaded, so the gc.collect() Spark's daemon runs after
each task walks only that task's objects."""

from __future__ import annotations

import subprocess
import sys

from tests.fixtures.expected import savepoint_dir

# The flinkstate source's own reader, as a Spark Python worker runs it (planning, then reads of
# partitions), without a JVM; prints what gc.collect() walks after each read.
PROBE = """
import gc, sys
from statecat.catalog.spark.source import FlinkStateDataSource
source = FlinkStateDataSource({"path": sys.argv[1], "state": "accState"})
reader = source.reader(source.schema())
partitions = list(reader.partitions())
for i in range(3):
    rows = sum(batch.num_rows for batch in reader.read(partitions[i % len(partitions)]))
    gc.collect()
    print(rows, len(gc.get_objects()), gc.get_freeze_count())
"""


def test_the_second_read_freezes_what_the_first_loaded():
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(savepoint_dir("sql_groupby_hashmap_2.3"))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\n")
    (rows1, tracked1, frozen1), (rows2, tracked2, frozen2), (rows3, tracked3, frozen3) = (
        map(int, line.split()) for line in out[:3]
    )
    assert rows1 > 0 and rows2 > 0 and rows3 > 0
    assert frozen1 == 0 and tracked1 > 50_000  # the first read loaded pyarrow, numba and statecat's code
    assert frozen2 > 50_000 and tracked2 < 2_000  # frozen when the second read started
    assert frozen3 == frozen2 and tracked3 < 2_000  # later reads freeze nothing more: their objects stay collectable
