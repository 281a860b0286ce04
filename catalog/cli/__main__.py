"""``python -m statecat.catalog.cli``: the ``statecat`` command without its installed script."""

import sys

from statecat.catalog.cli import main

sys.exit(main())
