"""One JetStream stream per topic base: desired configuration, creation, reconciliation."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, overload

from nats.js import JetStreamContext, api
from nats.js.errors import APIError, NotFoundError

from aviso_builtins.backends.jetstream.options import JetStreamOptions, OptionsError
from aviso_plugins._shared.literals import parse_duration, parse_size

logger = logging.getLogger("aviso.jetstream")

_RETENTION = {
    "limits": api.RetentionPolicy.LIMITS,
    "interest": api.RetentionPolicy.INTEREST,
}
_DISCARD = {"old": api.DiscardPolicy.OLD, "new": api.DiscardPolicy.NEW}
_STORAGE = {"file": api.StorageType.FILE, "memory": api.StorageType.MEMORY}
# Fields compared with an existing stream; unset values are normalised the way the server
# reports them so that an unchanged configuration causes no update traffic.
_RECONCILED = {
    "subjects": None,
    "max_msgs": -1,
    "max_bytes": -1,
    "max_age": 0,
    "max_msgs_per_subject": -1,
    "num_replicas": 1,
    "compression": api.StoreCompression.NONE,
    "discard": api.DiscardPolicy.OLD,
    "retention": api.RetentionPolicy.LIMITS,
}
# Compared only when configured (non-zero): unset, the server derives it from max_age.
_RECONCILED_WHEN_SET = ("duplicate_window",)
_DURATIONS = ("max_age", "duplicate_window")
_REPLICAS_SETTLE_SECONDS = 10.0


class StorageTypeMismatch(RuntimeError):
    """An existing stream keeps its messages elsewhere than configured (aviso-server 0.13
    refuses it too): recreating it would lose them, so the operator has to decide."""


def stream_name(base: str) -> str:
    return base.upper()


def desired_config(
    base: str, options: JetStreamOptions, policy: Mapping[str, Any] | None
) -> api.StreamConfig:
    config = api.StreamConfig(
        name=stream_name(base),
        subjects=[f"{base}.>"],
        storage=_STORAGE[options.storage_type],
        retention=_RETENTION[options.retention_policy],
        discard=_DISCARD[options.discard_policy],
        max_msgs_per_subject=1,
        max_msgs=options.max_messages,
        max_bytes=options.max_bytes,
        max_age=options.retention_seconds,
        num_replicas=options.replicas,
    )
    policy = policy or {}
    if "retention_time" in policy:
        config.max_age = parse_duration(policy["retention_time"])
    if "max_messages" in policy:
        config.max_msgs = policy["max_messages"]
    if "max_size" in policy:
        config.max_bytes = parse_size(policy["max_size"])
    if "allow_duplicates" in policy:
        config.max_msgs_per_subject = -1 if policy["allow_duplicates"] else 1
    if "compression" in policy:
        config.compression = (
            api.StoreCompression.S2 if policy["compression"] else api.StoreCompression.NONE
        )
    if options.duplicate_window_seconds is not None:
        # JetStream refuses a window longer than the stream's retention; a schema's shorter
        # retention_time caps it, as the server's own default window is capped.
        window = options.duplicate_window_seconds
        config.duplicate_window = min(window, config.max_age) if config.max_age else window
    return config


def _storage_name(storage: api.StorageType | str | None) -> str:
    """``file`` or ``memory`` (the server's JSON gives text, the desired config an enum)."""
    return api.StorageType(storage or api.StorageType.FILE).value


def _normalised(config: api.StreamConfig, field: str) -> Any:
    value = getattr(config, field)
    if value is None:
        return _RECONCILED[field]
    if field in _DURATIONS:
        return round(value)
    return value


class StreamKeeper:
    """Ensures each base's stream exists with the desired settings, once per process.

    The reference looks streams up before every operation; a successful ensure is cached
    here instead (publishing must not cost an extra round trip) and forgotten when an
    operation reports the stream missing.
    """

    def __init__(
        self,
        js: JetStreamContext,
        options: JetStreamOptions,
        policies: Mapping[str, Mapping[str, Any]],
    ) -> None:
        self._js = js
        self._options = options
        self._policies = {base.lower(): policy for base, policy in policies.items()}
        self._ensured: dict[str, asyncio.Future[str]] = {}
        self._seen: set[str] = set()
        """Bases whose stream an ensure has confirmed."""
        self._confirmed: dict[str, str] = {}
        """Stream names by base, while their ensure stands (the publish path's lookup)."""

    def forget(self, base: str) -> None:
        """Check ``base``'s stream again on next use; a check in progress is kept (during a
        cluster election every publish would otherwise start one more)."""
        pending = self._ensured.get(base)
        if pending is not None and pending.done():
            del self._ensured[base]
            self._confirmed.pop(base, None)

    def confirmed(self, base: str) -> str | None:
        """The stream name of ``base`` if its ensure has succeeded and is not forgotten."""
        return self._confirmed.get(base)

    async def ensure(self, base: str) -> str:
        """The stream name of ``base``, created or reconciled on first use.

        Concurrent first uses share one lookup (a burst of notifies to a new base must not
        become a burst of stream requests); a failed lookup is forgotten and retried.
        """
        name = self.confirmed(base)
        if name is not None:
            return name  # the common case: no task, no shield per publish
        pending = self._ensured.get(base)
        if pending is None:
            pending = self._ensured[base] = asyncio.ensure_future(self._ensure(base))
            pending.add_done_callback(functools.partial(self._settled, base))
        try:
            return await asyncio.shield(pending)
        except Exception:
            if self._ensured.get(base) is pending:
                del self._ensured[base]
            raise

    def _settled(self, base: str, pending: asyncio.Future[str]) -> None:
        """A successful check is confirmed; a failed one is dropped, and its error retrieved:
        the callers that waited for it (if any did not give up first) saw it raised."""
        if pending.cancelled():
            return
        failed = pending.exception() is not None
        if self._ensured.get(base) is not pending:
            return
        if failed:
            del self._ensured[base]
        else:
            self._confirmed[base] = pending.result()

    async def ensure_within(self, base: str, seconds: float) -> str:
        """:meth:`ensure`, except that for a base whose stream this keeper has seen before
        a re-check that takes longer than ``seconds`` (or times out) gives its name
        unconfirmed: while a JetStream cluster elects the stream's leader, its info request
        waits for the election too, and the caller's own request tells sooner whether the
        stream answers."""
        pending = self._ensured.get(base)
        if base not in self._seen or (pending is not None and pending.done()):
            return await self.ensure(base)
        try:
            return await asyncio.wait_for(self.ensure(base), seconds)
        except TimeoutError:
            return stream_name(base)

    async def _ensure(self, base: str) -> str:
        name = stream_name(base)
        desired = desired_config(base, self._options, self._policies.get(base.lower()))
        try:
            current = (await self._js.stream_info(name)).config
        except NotFoundError:
            current = None
        if current is None:
            try:
                await self._js.add_stream(desired)
            except APIError as exc:
                # A peer instance may have created it first; that is success.
                if "already in use" not in str(exc.description or exc):
                    refused = _replicas_refused(desired, exc)
                    if refused is None:
                        raise
                    raise refused from exc
        else:
            await self._reconcile(name, current, desired)
        self._seen.add(base)
        return name

    async def _reconcile(
        self, name: str, current: api.StreamConfig, desired: api.StreamConfig
    ) -> None:
        if _storage_name(current.storage) != _storage_name(desired.storage):
            raise StorageTypeMismatch(
                f"stream {current.name} exists with storage "
                f"{_storage_name(current.storage)} but notification_backend.jetstream."
                f"storage_type is {_storage_name(desired.storage)}; move or delete the "
                "stream, or configure its storage type"
            )
        fields = [*_RECONCILED, *(f for f in _RECONCILED_WHEN_SET if getattr(desired, f))]
        changed = {
            field: getattr(desired, field)
            for field in fields
            if _normalised(current, field) != _normalised(desired, field)
        }
        if not changed:
            return
        try:
            await self._js.update_stream(replace(current, **changed))
            logger.info("stream %s updated: %s", current.name, sorted(changed))
        except Exception as exc:
            if "num_replicas" in changed:
                # Fewer copies than configured would silently defeat a cluster's failover.
                refused = _replicas_refused(desired, exc, current.num_replicas or 1)
                raise refused from exc
            # Any other difference: the stream stays usable as it is.
            logger.warning(
                "stream %s could not be updated (%s); using it as it is", current.name, exc
            )
            return
        if "num_replicas" in changed:
            await self._await_replicas(name, desired.num_replicas or 1)

    async def _await_replicas(self, name: str, replicas: int) -> None:
        """Wait (bounded) until a re-replicated stream has a leader and current followers:
        until then the cluster may drop what is published to it."""
        deadline = asyncio.get_running_loop().time() + _REPLICAS_SETTLE_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            cluster = (await self._js.stream_info(name)).cluster
            followers = (cluster.replicas or []) if cluster is not None else []
            if (
                cluster is not None
                and cluster.leader
                and len(followers) == replicas - 1
                and all(peer.current for peer in followers)
            ):
                return
            await asyncio.sleep(0.1)
        logger.warning("stream %s: its %d replicas are not settled yet", name, replicas)


@overload
def _replicas_refused(desired: api.StreamConfig, exc: Exception) -> OptionsError | None: ...
@overload
def _replicas_refused(desired: api.StreamConfig, exc: Exception, current: int) -> OptionsError: ...
def _replicas_refused(
    desired: api.StreamConfig, exc: Exception, current: int | None = None
) -> OptionsError | None:
    """The error naming ``replicas`` for a refused replica count: always for an update of it
    (``current`` replicas), for a new stream only when the server's reason is the replicas."""
    reason = str(getattr(exc, "description", None) or exc)
    if current is None and "replica" not in reason.lower():
        return None
    has = "" if current is None else f" (the stream has {current})"
    return OptionsError(
        f"notification_backend.jetstream.replicas: stream {desired.name} cannot have "
        f"{desired.num_replicas} replicas{has}: {reason}"
    )
