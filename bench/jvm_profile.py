"""Where a Spark JVM's task threads spend a query's time: Java Flight Recorder samples, by category.

Used by ``bench_spark.py --jvm-profile``. JFR is started and dumped in the running session's JVM
with the JDK's ``jcmd``, its samples are read with the JDK's ``jfr``; only samples of task threads
count. A sample counts in each category whose method is on its stack (categories may nest: the
null checks happen inside the row conversion).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

# Label -> a method (class.method, as the stack names it) whose frames the category covers.
CATEGORIES = {
    "length(key): counting the key's characters": "org/apache/spark/unsafe/types/UTF8String.numChars",
    "Arrow rows -> UnsafeRows (Python source)": "GeneratedClass$SpecificUnsafeProjection.apply",
    "  of which Arrow null checks": "org/apache/spark/sql/vectorized/ArrowColumnVector.isNullAt",
    "custom metrics every 100 rows (Python source)": "org/apache/spark/sql/execution/datasources/v2/TaskState.updateMetrics",
    "reading the Arrow stream from Python": "org/apache/arrow/vector/ipc/ReadChannel.readFully",
    "Parquet decoding": "org/apache/spark/sql/execution/datasources/parquet/VectorizedParquetRecordReader.nextBatch",
}


def profile(spark, run: Callable[[], None]) -> dict[str, int]:
    """Samples of the task threads while ``run()`` runs: {"total": n, category: n, ...}."""
    from tests.fixtures.runtime import jdk_tool

    pid = str(spark.sparkContext._jvm.ProcessHandle.current().pid())
    jcmd = jdk_tool("jcmd")
    with tempfile.TemporaryDirectory(prefix="jfr-") as scratch:
        recording = Path(scratch) / "run.jfr"
        # Spark's task stacks run deeper than JFR's default 64 frames, which cuts off the frames
        # near the root that several categories are named by.
        subprocess.run([jcmd, pid, "JFR.configure", "stackdepth=512"], check=True, capture_output=True)
        subprocess.run(
            [jcmd, pid, "JFR.start", "name=statecat-bench", "settings=profile"], check=True, capture_output=True
        )
        try:
            run()
            subprocess.run(
                [jcmd, pid, "JFR.dump", "name=statecat-bench", f"filename={recording}"], check=True, capture_output=True
            )
        finally:
            subprocess.run([jcmd, pid, "JFR.stop", "name=statecat-bench"], capture_output=True)
        printed = subprocess.run(
            [jdk_tool("jfr"), "print", "--json", "--events", "jdk.ExecutionSample", str(recording)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    counts: Counter[str] = Counter()
    for event in json.loads(printed)["recording"]["events"]:
        thread = event["values"]["sampledThread"]
        if "task" not in (thread.get("javaName") or ""):  # "Executor task launch worker for task …"
            continue
        stack = [
            f"{f['method']['type']['name']}.{f['method']['name']}" for f in event["values"]["stackTrace"]["frames"]
        ]
        frames = set(stack)
        counts["total"] += 1
        if event["values"]["stackTrace"].get("truncated"):
            counts["truncated stacks"] += 1
        matched = False
        for label, method in CATEGORIES.items():
            if any(frame.endswith(method) for frame in frames):
                counts[label] += 1
                matched = True
        if not matched:  # named by its innermost Spark frame (the leaf may be a JDK or Scala method)
            spark_frames = [frame for frame in stack if frame.startswith("org/apache/spark/")]
            counts[f"other: {(spark_frames or stack or ['?'])[0].rsplit('/', 1)[-1]}"] += 1
    return dict(counts)


def print_profiles(profiles: dict[str, dict[str, int]]) -> None:
    """One column per profiled query: samples per category and their share of its total."""
    sides = list(profiles)
    print("\nJVM task-thread samples (Java Flight Recorder), by what is on the stack:")
    print(f"  {'':60}" + "".join(f"{side:>20}" for side in sides))
    others = Counter()
    for counts in profiles.values():
        others.update({label: n for label, n in counts.items() if label.startswith("other: ")})
    for label in ["total", "truncated stacks", *CATEGORIES, *(label for label, _ in others.most_common(8))]:
        cells = []
        for side in sides:
            n, total = profiles[side].get(label, 0), max(profiles[side].get("total", 0), 1)
            cells.append(f"{n:>10}" + (f" ({100 * n / total:4.1f} %)" if label != "total" else " " * 9))
        print(f"  {label[:60]:60}" + "".join(f"{c:>20}" for c in cells))
