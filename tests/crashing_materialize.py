"""``statecat materialize`` that dies abruptly after N lake commits: a crash between two commits.

Run as ``python -m tests.crashing_materialize N ARGS...`` (ARGS as for ``statecat materialize``).
The crash is injected here, in the test's process, so the product code carries no test hook.
"""

from __future__ import annotations

import os
import sys

from statecat.catalog import cli
from statecat.catalog.lake.materialize import Materializer

CRASH_EXIT_CODE = 75


def main() -> int:
    crash_after = int(sys.argv[1])
    committed = Materializer._committed

    def committed_then_crash(self) -> None:
        committed(self)
        if self._commits >= crash_after:
            os._exit(CRASH_EXIT_CODE)

    Materializer._committed = committed_then_crash
    return cli.main(["materialize", *sys.argv[2:]])


if __name__ == "__main__":
    sys.exit(main())
