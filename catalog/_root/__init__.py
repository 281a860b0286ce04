"""statecat: Apache Flink savepoints as SQL databases, on Spark.

Layers: ``statecat.statemeta`` (savepoint metadata), ``statecat.readers`` (state data as Arrow)
and ``statecat.catalog`` (Spark). Importing ``statecat`` loads none of them; ``statecat.attach``
is resolved on first use so that reader users never import Spark.
"""

from typing import Any

__version__ = "0.1.0"


_LAYERS = ("statemeta", "readers", "catalog")


def __getattr__(name: str) -> Any:
    import importlib

    if name == "attach":
        from statecat.catalog import attach

        return attach
    if name in _LAYERS:  # ``import statecat; statecat.catalog.session()`` works without importing every layer
        return importlib.import_module(f"statecat.{name}")
    raise AttributeError(f"module 'statecat' has no attribute {name!r}")
