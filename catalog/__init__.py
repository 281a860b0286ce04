"""statecat.catalog: Flink savepoints as Spark databases (``attach``, ``sql``, ``session``) and the CLI.

Spark is imported on first use only, so the CLI's reader commands start without it.
"""

_EXPORTS = {"attach", "materialise", "sql", "prepare", "session", "AttachResult", "REGISTRY_TABLE"}


def __getattr__(name: str):
    if name in _EXPORTS:
        from statecat.catalog import databases as _databases

        return getattr(_databases, name)
    raise AttributeError(f"module 'statecat.catalog' has no attribute {name!r}")
