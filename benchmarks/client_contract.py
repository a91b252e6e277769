"""The client-contract figures in one run: a bounded replay's start-up against an unbounded one
(``benchmarks.replay_bounds``), then notify with an ``Idempotency-Key`` on every request
against notify without one (``benchmarks.idempotency``).

    python -m benchmarks.client_contract [--quick]

``--quick`` stores 100,000 notifications instead of 1,000,000 and measures fewer rounds.
"""

from __future__ import annotations

import sys

from benchmarks import idempotency, replay_bounds


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    replay_bounds.main(["--count", "100000", "--jetstream-count", "0"] if quick else [])
    idempotency.main(["--quick"] if quick else [])


if __name__ == "__main__":
    main()
