"""statecat's columnar scan worker under a name Spark's ``pyspark.daemon`` imports (``pyspark*``)."""

from statecat.catalog.spark.columnar_worker import main

__all__ = ["main"]
