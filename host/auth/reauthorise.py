"""Keeping an open stream's authorisation current.

Two things can end a watch or replay after it was admitted: the caller's token expiring
(``auth_expired``, at the JWT's ``exp`` itself) and an authoriser that admitted it saying no
on a periodic recheck (``access_revoked``, e.g. a destination withdrawn at ECPDS). Both are
deadlines on the event loop's clock that the stream folds into its single timer; a due
recheck runs as a short task of its own so a slow upstream never holds up delivery.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from aviso_host.auth.gate import AuthGate
from aviso_host.logs import log_event
from aviso_host.metrics import AuthoriserRecorder
from aviso_host.schemas import EventSchema
from aviso_host.streaming.control import StreamControl
from aviso_plugins.types import AuthError, Caller, StreamAuthoriser

AUTH_EXPIRED = "auth_expired"
ACCESS_REVOKED = "access_revoked"
EXPIRED_CREDENTIAL = "Authentication expired"


@dataclass
class _Recheck:
    name: str
    authoriser: StreamAuthoriser
    recorder: AuthoriserRecorder
    interval: float
    due: float


class Reauthorisation:
    """The authorisation deadlines of one open stream."""

    def __init__(
        self,
        control: StreamControl,
        caller: Caller,
        event_type: str,
        identifier: Mapping[str, str],
        expires_at: float,
        rechecks: list[_Recheck],
    ) -> None:
        self._control = control
        self._caller = caller
        self._event_type = event_type
        self._identifier = identifier
        self.expires_at = expires_at
        """Loop time at which the caller's credential expires (``inf``: never)."""
        self._rechecks = rechecks
        self._pending: asyncio.Task[None] | None = None

    def wake_at(self) -> float:
        """The next loop time this stream must look at its authorisation again."""
        return min([self.expires_at, *(recheck.due for recheck in self._rechecks)])

    def poll(self, now: float) -> None:
        """Stop the stream if its credential expired; start the rechecks that are due."""
        expires = self._caller.expires_at
        if now >= self.expires_at and expires is not None:
            remaining = expires - time.time()
            if remaining > 0:
                # ``exp`` is on the wall clock; the loop's clock can lag it by a few ms.
                self.expires_at = now + remaining
                return
            if self._control.stop_reason is None:
                log_event(
                    "stream.auth.expired",
                    "credential expired; closing the stream",
                    logging.INFO,
                    request_id=self._control.request_id,
                    username=self._caller.username,
                )
            self._control.stop(AUTH_EXPIRED)
            return
        due = [recheck for recheck in self._rechecks if now >= recheck.due]
        for recheck in due:
            recheck.due = now + recheck.interval
        # A recheck still running when the next falls due counts for both.
        if due and self._pending is None:
            self._pending = asyncio.create_task(self._run(due))

    async def _run(self, due: list[_Recheck]) -> None:
        try:
            for recheck in due:
                if await self._still_allowed(recheck):
                    continue
                log_event(
                    "stream.auth.revoked",
                    "access revoked on recheck; closing the stream",
                    logging.INFO,
                    request_id=self._control.request_id,
                    username=self._caller.username,
                    authoriser=recheck.name,
                )
                self._control.stop(ACCESS_REVOKED)
                return
        finally:
            self._pending = None

    async def _still_allowed(self, recheck: _Recheck) -> bool:
        """``False`` only on a definite denial; an undecided check keeps the stream open."""
        try:
            await recheck.recorder.judge(
                recheck.authoriser.reauthorise(self._caller, self._event_type, self._identifier)
            )
        except AuthError as exc:
            if exc.status == 403:
                return False
            failure = f"{exc.status} {exc.message}"
        except Exception as exc:
            failure = f"{type(exc).__name__}: {exc}"
        else:
            return True
        # Failing open: an unreachable upstream must not cut every long stream at once (their
        # reconnects would only meet the same outage); the next recheck asks again.
        log_event(
            "stream.auth.recheck_failed",
            f"recheck undecided, stream stays open until the next one: {failure}",
            logging.WARNING,
            request_id=self._control.request_id,
            authoriser=recheck.name,
        )
        return True

    def close(self) -> None:
        if self._pending is not None:
            self._pending.cancel()


def reauthorisation(
    gate: AuthGate | None,
    schema: EventSchema | None,
    caller: Caller | None,
    identifier: Mapping[str, str],
    control: StreamControl,
) -> Reauthorisation | None:
    """What may end this admitted stream's authorisation; ``None`` when nothing can.

    Raises the 401 for a credential its provider says has already expired: its stream would
    end at once with ``auth_expired``, which clients answer by reconnecting at once with the
    same credential, in a loop. A 401 instead makes them refresh it (pyaviso refreshes once,
    then stops).
    """
    if gate is None or caller is None:
        return None
    if caller.expires_at is not None and caller.expires_at <= time.time():
        raise gate.failure(401, EXPIRED_CREDENTIAL)
    rechecks: list[_Recheck] = []
    loop_now = asyncio.get_running_loop().time()
    stream_auth = schema.settings.auth if schema is not None else None
    # Admins skipped the authorisers at admission, so there is nothing to recheck for them.
    if schema is not None and stream_auth is not None and not gate.is_admin(caller):
        for name in stream_auth.plugins:
            authoriser = gate.authorisers.get(name)
            interval = authoriser.recheck_seconds if authoriser is not None else 0.0
            if authoriser is not None and interval > 0:
                recorder = gate.metrics.authorisers[name]
                rechecks.append(_Recheck(name, authoriser, recorder, interval, loop_now + interval))
    expires_at = math.inf
    if caller.expires_at is not None:
        # Wall-clock expiry moved onto the loop's monotonic clock, which the stream timer uses.
        expires_at = loop_now + (caller.expires_at - time.time())
    if expires_at == math.inf and not rechecks:
        return None
    event_type = schema.event_type if schema is not None else ""
    return Reauthorisation(control, caller, event_type, identifier, expires_at, rechecks)
