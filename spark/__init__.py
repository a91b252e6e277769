"""Publish notifications from PySpark (and read history back) through aviso sink plugins.

``register(spark)`` makes ``df.write.format("aviso")``, ``df.writeStream.format("aviso")``
and ``spark.read.format("aviso")`` available in a session; see ``aviso_spark.datasource``
and ``aviso_spark.reader`` for the options. Importing this package does not import pyspark
(``aviso-server serve`` loads the ``aviso-server spark`` commands without it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def register(spark: SparkSession) -> None:
    """Register the ``aviso`` data source in ``spark`` (once per session is enough)."""
    from aviso_spark.datasource import AvisoDataSource

    spark.dataSource.register(AvisoDataSource)


__all__ = ["register"]
