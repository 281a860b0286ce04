"""A Python worker freezes what its first read finds alive, so Spark's gc.collect() after each task
walks only that task's objects."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import gc
from statecat.catalog import source
before = gc.get_freeze_count()
source._freeze_imported_objects()
first = gc.get_freeze_count()
leftover = [object() for _ in range(1000)]
source._freeze_imported_objects()
print(before, first, gc.get_freeze_count())
"""


def test_the_first_read_freezes_the_imported_objects_once():
    out = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    before, first, again = map(int, out.split())
    assert before == 0
    assert first > 10_000  # pyspark, pyarrow and statecat's modules
    assert again == first  # later reads freeze nothing more: their objects stay collectable
