"""The ``aviso`` data source: ``df.write.format("aviso")`` and
``df.writeStream.format("aviso")`` publish rows as notifications through a sink plugin
(options in ``aviso_spark.writer``); ``spark.read.format("aviso")`` reads history back
(options in ``aviso_spark.reader``); ``spark.readStream.format("aviso")`` follows it
(``aviso_spark.stream_source``).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from aviso_spark import deadletter
from aviso_spark.reader import AvisoReader, ReadOptions, described_fields, history_schema
from aviso_spark.stream_source import AvisoStreamReader, StreamOptions
from aviso_spark.writer import AvisoStreamWriter, AvisoWriter, WriteOptions


class AvisoDataSource(DataSource):
    default_partitions = 1
    """A read's ``numPartitions`` when the option is absent (see :meth:`for_session`)."""

    @classmethod
    def name(cls) -> str:
        return "aviso"

    @classmethod
    def for_session(cls, default_partitions: int) -> type[AvisoDataSource]:
        """The data source with a session's default parallelism as its default partition
        count: the Python workers that plan a read have no Spark context to ask, and a class
        made here travels to them by value, attribute included."""
        return type(cls.__name__, (cls,), {"default_partitions": max(1, default_partitions)})

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = WriteOptions.parse(self.options, schema)
        deadletter.clear(Path(options.deadletter_path))
        return AvisoWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = WriteOptions.parse(self.options, schema)
        # Earlier batches' rejects stay: a streaming query appends, batch by batch.
        Path(options.deadletter_path).mkdir(parents=True, exist_ok=True)
        return AvisoStreamWriter(options)

    def schema(self) -> StructType | str:
        options = ReadOptions.parse(self.options)
        return history_schema(options, described_fields(options))

    def reader(self, schema: StructType) -> DataSourceReader:
        options = ReadOptions.parse(self.options, self.default_partitions)
        return AvisoReader(options, schema, described_fields(options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = StreamOptions.parse(self.options, self.default_partitions)
        return AvisoStreamReader(options, schema, described_fields(options.read))
