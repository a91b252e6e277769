"""Publish notifications from PySpark (and read history back) through aviso sink plugins.

``register(spark)`` makes ``df.write.format("aviso")``, ``df.writeStream.format("aviso")``,
``spark.read.format("aviso")`` and ``spark.readStream.format("aviso")`` available in a
session; see ``aviso_spark.datasource``, ``aviso_spark.reader`` and
``aviso_spark.stream_source`` for the options. Importing this package does not import pyspark
(``aviso-server serve`` loads the ``aviso-server spark`` commands without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the ``aviso`` data source in ``spark`` (once per session is enough).

    A read's default partition count is the session's default parallelism.
    """
    from aviso_spark.datasource import AvisoDataSource

    try:
        parallelism = spark.sparkContext.defaultParallelism
    except Exception:  # Spark Connect sessions have no context: one partition unless told
        parallelism = 1
    spark.dataSource.register(AvisoDataSource.for_session(parallelism))


__all__ = ["register"]
