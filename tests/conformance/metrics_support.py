"""Scraping the metrics listener of a real server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.configs import with_changes
from tests.support.process import free_port
from tests.support.server import RunningServer, running_server

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Scrape:
    """One scrape: every sample by name and label set, plus the raw text."""

    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]
    text: str

    def value(self, name: str, **labels: str) -> float | None:
        """The sample's value, ``None`` when the series is not exported."""
        return self.samples.get((name, frozenset(labels.items())))

    def series(self, name: str) -> list[dict[str, str]]:
        """The label sets of every sample called ``name``."""
        return [dict(labels) for sample, labels in self.samples if sample == name]


def parse(text: str) -> Scrape:
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    return Scrape(samples, text)


@dataclass
class Metered:
    """A running server plus its metrics listener's URL."""

    server: RunningServer
    metrics_url: str

    @property
    def url(self) -> str:
        return self.server.url

    def scrape(self) -> Scrape:
        response = httpx.get(self.metrics_url, timeout=10.0)
        assert response.status_code == 200, response.text
        return parse(response.text)

    def wait_for(
        self, settled: Callable[[Scrape], bool], timeout: float = 10.0, interval: float = 0.05
    ) -> Scrape:
        """Scrape until ``settled`` holds (a server-side close has no client-visible event)."""
        deadline = time.monotonic() + timeout
        while True:
            scrape = self.scrape()
            if settled(scrape) or time.monotonic() > deadline:
                return scrape
            time.sleep(interval)


def with_metrics(document: Mapping[str, Any], port: int | None = None) -> dict[str, Any]:
    """``document`` with the metrics listener enabled on a free loopback port."""
    metrics = {"enabled": True, "host": "127.0.0.1", "port": port or free_port()}
    return with_changes(dict(document), metrics=metrics)


@contextmanager
def metered(document: Mapping[str, Any], extra_plugins: tuple[Any, ...] = ()) -> Iterator[Metered]:
    """Serve ``document`` with metrics enabled; yields the server and its scrape URL."""
    doc = with_metrics(document)
    with running_server(doc, extra_plugins) as server:
        yield Metered(server, f"http://127.0.0.1:{doc['metrics']['port']}/metrics")
