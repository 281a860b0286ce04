"""statecat's columnar scan worker under a name Spark's ``pyspark.daemon`` imports (``pyspark*``)."""

from statecat.catalog.columnar_worker import main

__all__ = ["main"]
