"""The garbage collector's pace for a server holding thousands of streams, and the objects
it need not scan.

With CPython's default first threshold (700 net new container objects), delivering one
notification to 10,000 watches runs dozens of young collections: every woken stream briefly
holds a scheduled callback and a fresh waiter, so the net count peaks in the middle of the
sweep. Each collection promotes the waiters that are still alive, and those live until the
next notification, so every few notifications the old generation has grown by a quarter
and CPython runs a full collection over every object of every stream (about a second at
10,000 watches). At 10,000 watches that was half of the server's CPU per notification and
the whole of its p99.

A first threshold above the sweep's peak lets those objects die by reference counting
before any collection sees them. Cyclic garbage still gets collected, only in larger
batches (at most this many young objects wait for it).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000
"""Net new container objects before a young collection (CPython's default: 700)."""


def pace_garbage_collector() -> None:
    """Raise the first collection threshold, keeping the older generations' defaults."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


def freeze_startup_objects() -> None:
    """Leave everything that exists now out of later collections.

    Called once the app is built: modules, plugins and the app live as long as the process,
    and a busy server makes a full pass every few thousand requests (the in-memory backend's
    records keep adding long-lived objects), which would scan them all again each time.
    """
    gc.collect()
    gc.freeze()
