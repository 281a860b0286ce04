"""statecat.catalog: Flink savepoints as Spark databases (``attach``, ``sql``, ``session``) and the CLI.

Spark is imported on first use only, so the CLI's reader commands start without it.
"""

_EXPORTS = {
    "attach": "databases", "materialise": "databases", "AttachResult": "databases", "EAGER_LIMIT": "databases",
    "sql": "queries", "prepare": "queries",
    "session": "sessions",
    "REGISTRY_TABLE": "registry",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(f"statecat.catalog.{module}"), name)
    raise AttributeError(f"module 'statecat.catalog' has no attribute {name!r}")
