"""What an aggregate keeps per counted notification does not grow with what its writer put
in it: every stream remembers each notification it counted (to count a re-publish once),
for as long as it lives."""

from __future__ import annotations

import gc
import json
import tracemalloc

from aviso_builtins.aggregate.counts import GroupCounts
from aviso_plugins.types import StoredNotification

POLYGON_BYTES = 64 * 1024
NOTIFICATIONS = 200


def _record(sequence: int) -> StoredNotification:
    # Built apart for each record, as a backend decodes each message it reads.
    polygon = f"{sequence:08d}" + "1.0,2.0," * (POLYGON_BYTES // 8)
    identifier = json.dumps({"run": "r1", "step": str(sequence)})
    return StoredNotification(
        sequence=sequence,
        topic=f"fcagg.r1.{sequence}",
        payload="null",
        time_ns=0,
        metadata={"identifier": identifier, "spatial_geometry": polygon},
    )


def test_counted_notifications_are_not_held_in_full() -> None:
    counts = GroupCounts(["run"], {"run": 1}, max_groups=10)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for sequence in range(1, NOTIFICATIONS + 1):
            assert counts.add(_record(sequence))
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Held in full, the polygons alone would be NOTIFICATIONS * POLYGON_BYTES (12.5 MiB).
    assert kept < NOTIFICATIONS * 1024, kept
    # A re-publish of one already counted still counts once.
    assert not counts.add(_record(7))
    assert json.loads(counts.json_text({"type": "snapshot"}))["total"] == NOTIFICATIONS
