"""Realistic notification bodies for the shipped ``dissemination`` and ``mars`` schemas.

Values follow ECMWF's operational output: four base times a day, the main streams with
their own step lists, destinations named like national services. Every payload carries the
publisher's wall clock as ``sent_at`` (seconds, float) for publish-to-receive latency.
"""

from __future__ import annotations

import json
import random
import time
from datetime import UTC, datetime

DESTINATIONS = ("DWD", "MF", "KNMI", "UKMO", "METNO", "SMHI", "FMI", "DMI", "AEMET", "IPMA")
TARGETS = ("E1", "E2", "E3", "E4")
BASE_TIMES = ("0000", "0600", "1200", "1800")
_HIGH_RES = [*range(0, 91), *range(93, 145, 3), *range(150, 241, 6)]
_ENSEMBLE = [*range(0, 145, 3), *range(150, 361, 6)]
STEPS = {"oper": _HIGH_RES, "enfo": _ENSEMBLE, "wave": _HIGH_RES, "waef": _ENSEMBLE}
STREAMS = tuple(STEPS)

# The live traffic every watcher of the watch scenario follows, and the history replayed.
WATCH_FILTER = {"event_type": "mars", "identifier": {"class": "od", "stream": "enfo"}}
REPLAY_CLASS = "rd"
REPLAY_FILTER = {"event_type": "mars", "identifier": {"class": REPLAY_CLASS}, "from_id": "1"}


def today() -> str:
    return datetime.now(UTC).strftime("%Y%m%d")


def _dumps(body: object) -> str:
    return json.dumps(body, separators=(",", ":"))


def dissemination(rng: random.Random, date: str) -> str:
    stream = rng.choice(STREAMS)
    step = rng.choice(STEPS[stream])
    base = rng.choice(BASE_TIMES)
    destination = rng.choice(DESTINATIONS)
    target = rng.choice(TARGETS)
    name = f"{target}D{date[4:]}{base}{step:04d}1"
    body = {
        "event_type": "dissemination",
        "identifier": {
            "destination": destination,
            "target": target,
            "class": "od",
            "expver": "0001",
            "domain": "g",
            "date": date,
            "time": base,
            "stream": stream,
            "step": step,
        },
        "payload": {"location": f"/data/diss/{destination}/{name}", "sent_at": time.time()},
    }
    return _dumps(body)


def mars(
    rng: random.Random, date: str, stream: str | None = None, klass: str = "od", n: int = 0
) -> str:
    stream = stream or rng.choice(STREAMS)
    body = {
        "event_type": "mars",
        "identifier": {
            "class": klass,
            "expver": "0001",
            "domain": "g",
            "date": date,
            "time": rng.choice(BASE_TIMES),
            "stream": stream,
            "step": rng.choice(STEPS[stream]),
        },
        "payload": {"n": n, "sent_at": time.time()},
    }
    return _dumps(body)


def notify_mix(rng: random.Random, date: str) -> str:
    """What a dissemination-heavy producer sends: 4 dissemination notifications per mars one."""
    if rng.random() < 0.8:
        return dissemination(rng, date)
    return mars(rng, date)


def watched(rng: random.Random, date: str) -> str:
    """A notification every watcher of :data:`WATCH_FILTER` receives."""
    return mars(rng, date, stream="enfo")


def history(n: int, date: str) -> bytes:
    """The n-th notification of the seeded replay history (deterministic)."""
    return mars(random.Random(n), date, klass=REPLAY_CLASS, n=n).encode()
