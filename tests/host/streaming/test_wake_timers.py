"""Stream deadlines on the loop's shared timer, and the garbage collector's pace.

The loops run on a virtual clock: a stall of the process between two steps (a loaded
machine) cannot make a later deadline come due before the test looks."""

from __future__ import annotations

import asyncio
import gc

from aviso_host.streaming.collector import YOUNG_THRESHOLD, pace_garbage_collector
from aviso_host.streaming.control import StreamControl
from tests.support.virtual_clock import run_on_virtual_clock


async def _sleeper(control: StreamControl, delay: float, woken: list[str]) -> None:
    loop = asyncio.get_running_loop()
    await control.sleep_until(loop.time() + delay)
    woken.append(control.request_id)


def test_deadlines_wake_each_stream_in_order() -> None:
    run_on_virtual_clock(_deadlines_wake_each_stream_in_order())


async def _deadlines_wake_each_stream_in_order() -> None:
    woken: list[str] = []
    controls = {name: StreamControl(name) for name in ("late", "early", "middle")}
    delays = {"late": 0.15, "early": 0.05, "middle": 0.1}
    await asyncio.wait_for(
        asyncio.gather(*(_sleeper(controls[n], delays[n], woken) for n in delays)), 5
    )
    assert woken == ["early", "middle", "late"]


def test_a_moved_deadline_does_not_wake_at_the_old_one() -> None:
    run_on_virtual_clock(_a_moved_deadline_does_not_wake_at_the_old_one())


async def _a_moved_deadline_does_not_wake_at_the_old_one() -> None:
    loop = asyncio.get_running_loop()
    moved, steady = StreamControl("moved"), StreamControl("steady")
    woken: list[str] = []
    # ``moved`` registers an early deadline, is woken by hand, then sleeps to a later one.
    first = asyncio.create_task(_sleeper(moved, 0.05, woken))
    await asyncio.sleep(0)
    moved.wake()
    await first
    assert moved.timer_when is not None  # its early entry is still on the heap
    later = loop.time() + 0.3
    sleeping = asyncio.create_task(moved.sleep_until(later))
    await asyncio.wait_for(_sleeper(steady, 0.1, woken), 5)
    assert not sleeping.done()  # the early entry came due in between and was skipped
    await asyncio.wait_for(sleeping, 5)
    assert loop.time() >= later - 0.002


def test_a_wake_while_busy_is_kept_for_the_next_sleep() -> None:
    run_on_virtual_clock(_a_wake_while_busy_is_kept_for_the_next_sleep())


async def _a_wake_while_busy_is_kept_for_the_next_sleep() -> None:
    control = StreamControl("busy")
    control.wake()  # nobody sleeps yet
    loop = asyncio.get_running_loop()
    await asyncio.wait_for(control.sleep_until(loop.time() + 60), 1)


def test_a_cancelled_deadline_never_wakes() -> None:
    run_on_virtual_clock(_a_cancelled_deadline_never_wakes())


async def _a_cancelled_deadline_never_wakes() -> None:
    control = StreamControl("gone")
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(control.sleep_until(loop.time() + 0.05))
    await asyncio.sleep(0)
    task.cancel()
    control.cancel_timer()
    assert control.timer_when is None
    await asyncio.sleep(0.1)
    assert not control._woken


def test_pacing_raises_only_the_young_threshold() -> None:
    saved = gc.get_threshold()
    try:
        gc.set_threshold(700, 11, 12)
        pace_garbage_collector()
        assert gc.get_threshold() == (YOUNG_THRESHOLD, 11, 12)
    finally:
        gc.set_threshold(*saved)
