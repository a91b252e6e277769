"""Leases: one holder at a time for a piece of work, across every worker and instance.

A lease is one key of a shared-state bucket with a TTL (:meth:`StorageBackend.shared_state`
with ``ttl_seconds``): taken with :meth:`SharedState.create` (of concurrent takers exactly
one wins), renewed with :meth:`SharedState.update` over the revision it last wrote, gone when
its holder stops renewing it (the bucket's TTL removes it), so another worker takes it over
within a TTL and a renewal period when the holder dies.

The holder learns it lost the lease from a renewal that fails: the key changed (another
holder took it after it expired) or could not be renewed before the TTL ran out since the
last renewal sent. :class:`LeaseKeeper` turns that into two calls, ``on_taken`` and
``on_lost``, between which the work runs.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Awaitable, Callable

from aviso_plugins.state import SharedState

__all__ = ["DEFAULT_LEASE_SECONDS", "Lease", "LeaseKeeper", "LeaseLost", "holder_id"]

DEFAULT_LEASE_SECONDS = 6.0
"""The TTL of the host's lease bucket: a dead holder's work is taken over within about that
long plus a third of it."""

_logger = logging.getLogger("aviso.leases")


def holder_id() -> str:
    """A name for this process as a lease holder, unique across restarts and hosts."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """One key of a TTL bucket, held by ``holder`` while :attr:`held`.

    ``ttl_seconds`` is the bucket's TTL; the lease counts as held until that long after the
    last successful write was *sent* (the store started the entry's TTL after that), so a
    holder that stops its work when :attr:`held` turns false never overlaps the next one.
    """

    def __init__(self, state: SharedState, key: str, holder: str, ttl_seconds: float) -> None:
        if ttl_seconds <= 0:
            raise ValueError("a lease needs a positive TTL")
        self.state = state
        self.key = key
        self.holder = holder
        self.ttl_seconds = ttl_seconds
        self._revision: int | None = None
        self._valid_until = 0.0

    @property
    def held(self) -> bool:
        return self._revision is not None and time.monotonic() < self._valid_until

    @property
    def valid_until(self) -> float:
        """The ``time.monotonic()`` until which the lease is surely held (if it is)."""
        return self._valid_until

    async def acquire(self) -> bool:
        """Take the lease if nobody holds it; whether this holder holds it now."""
        if self.held:
            return True
        sent = time.monotonic()
        revision = await self.state.create(self.key, self.holder.encode())
        if revision is None:
            return False
        self._revision, self._valid_until = revision, sent + self.ttl_seconds
        return True

    async def renew(self) -> bool:
        """Write the lease again; whether it is still held. A store that cannot be reached
        raises, and the lease stays held until its TTL since the last renewal runs out."""
        if self._revision is None:
            return False
        sent = time.monotonic()
        revision = await self.state.update(self.key, self.holder.encode(), self._revision)
        if revision is None:  # expired and taken, or deleted
            self._revision = None
            return False
        self._revision, self._valid_until = revision, sent + self.ttl_seconds
        return True

    async def release(self) -> None:
        """Give the lease up now, so that another worker need not wait for its TTL."""
        revision, self._revision = self._revision, None
        if revision is not None:
            await self.state.delete(self.key, revision)

    def forget(self) -> None:
        """Count the lease as lost without writing anything (its TTL frees it)."""
        self._revision = None


class LeaseLost(RuntimeError):
    """The lease was lost (not renewed in time, or taken over) while ``on_taken`` ran."""


class LeaseKeeper:
    """Takes a lease whenever it is free and keeps it renewed; ``on_taken`` runs once this
    holder has it, ``on_lost`` when it stops having it (a renewal failed, or :meth:`stop`).

    ``on_taken`` that raises gives the lease back (logged), to be tried again later. The
    lease is renewed while ``on_taken`` runs (a start that loads much state may outlast its
    TTL); ``on_taken`` is cancelled, and :class:`LeaseLost` raised, if it is lost meanwhile.
    """

    def __init__(
        self,
        lease: Lease,
        on_taken: Callable[[], Awaitable[None]],
        on_lost: Callable[[], Awaitable[None]],
    ) -> None:
        self.lease = lease
        self._on_taken = on_taken
        self._on_lost = on_lost
        self._active = False
        self._task: asyncio.Task[None] | None = None
        self._period = lease.ttl_seconds / 3

    @property
    def active(self) -> bool:
        """Whether ``on_taken`` ran and ``on_lost`` has not yet."""
        return self._active

    async def try_take(self) -> bool:
        """One attempt at the lease (``on_taken`` included); whether this holder is active.
        Raises what ``on_taken`` raised (:class:`LeaseLost` if the lease was lost while it
        ran), after giving the lease back."""
        if self._active:
            return True
        if not await self.lease.acquire():
            return False
        try:
            await self._renewed_while(self._on_taken())
        except BaseException:
            await self._give_back()
            raise
        self._active = True
        return True

    async def _renewed_while(self, work: Awaitable[None]) -> None:
        """``work``, the lease renewed every period until it returns."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self._period)
                if done:
                    return task.result()
                try:
                    if await self._renewed_in_time():
                        continue
                except Exception as exc:
                    _logger.warning("lease %s: %s", self.lease.key, exc or type(exc).__name__)
                    if self.lease.held:  # a renewal may still succeed before the TTL runs out
                        continue
                self.lease.forget()
                raise LeaseLost(f"lease {self.lease.key} lost while its work was starting")
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    def start(self) -> None:
        """Keep taking and renewing in a task of its own (until :meth:`stop`)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        """Stop taking and renewing; if active, ``on_lost`` runs and the lease is given back."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._active:
            await self._lose()
            await self._give_back()

    async def _run(self) -> None:
        # Spread the attempts of many workers (and many leases) over the period.
        await asyncio.sleep(random.uniform(0, self._period / 2))
        while True:
            wait = self._period
            try:
                if self._active:
                    await self._renew()
                else:
                    await self.try_take()
            except Exception as exc:
                _logger.warning("lease %s: %s", self.lease.key, exc or type(exc).__name__)
                if self._active:  # a renewal may still succeed before the TTL runs out
                    wait = min(1.0, self._period / 3)
            await asyncio.sleep(wait)

    async def _renewed_in_time(self) -> bool:
        """Whether a renewal succeeded before the lease's TTL ran out (``TimeoutError`` if
        the store did not answer by then). ``asyncio.timeout`` rather than ``wait_for``: on
        Python 3.11 ``wait_for`` returns the renewal's result when the renewal finishes as
        its caller is cancelled, swallowing the cancellation, and the keeper then never
        stops."""
        remaining = self.lease.valid_until - time.monotonic()
        if remaining <= 0:
            return False
        async with asyncio.timeout(remaining):
            return await self.lease.renew()

    async def _renew(self) -> None:
        """Renew, giving up (``on_lost``) no later than the lease's TTL since the last
        renewal sent, however long the store takes to answer."""
        try:
            if await self._renewed_in_time():
                return
        except BaseException:
            if not self.lease.held:
                self.lease.forget()
                await self._lose()
            raise
        self.lease.forget()
        await self._lose()

    async def _lose(self) -> None:
        self._active = False
        try:
            await self._on_lost()
        except Exception as exc:
            _logger.warning("lease %s: on_lost failed: %s", self.lease.key, exc)

    async def _give_back(self) -> None:
        try:
            await self.lease.release()
        except Exception as exc:  # its TTL frees it
            _logger.info("lease %s: release failed: %s", self.lease.key, exc)
