"""Publish notifications from PySpark (and read history back) through aviso sink plugins.

``register(spark)`` makes ``df.write.format("aviso")``, ``df.writeStream.format("aviso")``,
``spark.read.format("aviso")`` and ``spark.readStream.format("aviso")`` available in a
session; see ``aviso_spark.writer``, ``aviso_spark.reader`` and
``aviso_spark.stream_source`` for the options. Importing this package does not import pyspark
(``aviso-server serve`` loads the ``aviso-server spark`` commands without it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
PARTITIONS_CONF = "spark.aviso.numPartitions"
"""A session setting: the default ``numPartitions`` of aviso reads (Spark Connect)."""


def register(spark: SparkSession, partitions: int | None = None) -> None:
    """Register the ``aviso`` data source in ``spark`` (once per session is enough) and turn
    on Python data source filter pushdown, which its reads use.

    A read's default partition count is ``partitions``, else the session setting
    ``spark.aviso.numPartitions``, else the session's default parallelism: the context's
    on a classic session; on Spark Connect (no context) ``spark.default.parallelism``, else
    the ``N`` of a ``local[N]`` master, else 1.
    """
    from aviso_spark.datasource import AvisoDataSource

    spark.conf.set(PUSHDOWN_CONF, "true")
    count = partitions if partitions is not None else default_partitions(spark)
    spark.dataSource.register(AvisoDataSource.for_session(count))


def default_partitions(spark: SparkSession) -> int:
    """See :func:`register`."""
    configured = _setting(spark, PARTITIONS_CONF)
    if configured is not None:
        return positive_integer(configured, PARTITIONS_CONF)
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect: no context on the client
        pass
    parallelism = _setting(spark, "spark.default.parallelism")
    if parallelism is not None:
        return positive_integer(parallelism, "spark.default.parallelism")
    master = _setting(spark, "spark.master") or ""
    if master.startswith("local[") and master.endswith("]"):
        cores = master[len("local[") : -1].split(",")[0]
        return os.cpu_count() or 1 if cores == "*" else positive_integer(cores, "spark.master")
    return 1


def _setting(spark: SparkSession, key: str) -> str | None:
    try:
        value = spark.conf.get(key, None)
    except Exception:  # a key a Connect server refuses to show
        return None
    return value or None


def positive_integer(text: str, key: str) -> int:
    """``text`` as an integer of 1 or more; else a ValueError naming ``key``."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{key} must be a positive integer, got {text!r}")
    return value


__all__ = ["default_partitions", "positive_integer", "register"]
