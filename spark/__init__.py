"""Publish notifications from PySpark (and read history back) through aviso sink plugins.

``register(spark)`` makes ``df.write.format("aviso")`` available in a session; see
``aviso_spark.datasource`` for the options.
"""

from pyspark.sql import SparkSession

from aviso_spark.datasource import AvisoDataSource


def register(spark: SparkSession) -> None:
    """Register the ``aviso`` data source in ``spark`` (once per session is enough)."""
    spark.dataSource.register(AvisoDataSource)


__all__ = ["AvisoDataSource", "register"]
