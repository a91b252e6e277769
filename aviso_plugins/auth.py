"""Authentication (auth providers resolve a request's caller) and authorisation (stream
authorisers add a read check a stream opts into)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from aviso_plugins.fields import FieldHandler

__all__ = [
    "AuthError",
    "AuthProvider",
    "AuthRequest",
    "AuthoriserConfiguration",
    "AuthoriserMetrics",
    "Caller",
    "ConfigurationProblem",
    "MalformedCredentials",
    "RequestHeaders",
    "StreamAuthoriser",
]


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated user, as a provider resolved it.

    ``realm`` and ``roles`` drive every decision (admin, stream roles): a caller without a
    realm matches no realm-role map. ``attributes`` are carried for plugins, unused by the
    host.
    """

    username: str
    realm: str | None = None
    roles: frozenset[str] = frozenset()
    attributes: Mapping[str, str] = field(default_factory=dict, hash=False)
    expires_at: float | None = None
    """When the credential expires (seconds since the epoch, a JWT's ``exp``): streams it
    opened are closed then. ``None``: it does not expire."""


class AuthError(Exception):
    """Authentication or authorisation refused; the host answers with the auth error body.

    ``status`` is 401, 403, 503 (no verdict could be reached) or 500 (an aviso-side
    defect); ``message`` is shown to the client, so it must never carry a secret or an
    upstream service's own error text.
    """

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class MalformedCredentials(AuthError):
    """The credentials themselves are unusable, e.g. a malformed header (always 401).

    The host answers 401 with ``message`` on admin paths and treats the request as
    anonymous everywhere else, so providers must raise this, not a plain
    :class:`AuthError`, for header defects.
    """

    def __init__(self, message: str) -> None:
        super().__init__(401, message)


class RequestHeaders(Mapping[str, str]):
    """A request's header fields, read-only: names case-insensitive, values as sent.

    Values are the bytes decoded as latin-1, so nothing is lost (non-ASCII bytes show as
    characters above U+007E). As a mapping, a name gives its *first* field; use
    :meth:`get_list` for every field of a repeated name.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Sequence[tuple[str, str]]) -> None:
        self._fields = tuple((name.lower(), value) for name, value in fields)

    @classmethod
    def from_raw(cls, raw: Sequence[tuple[bytes, bytes]]) -> RequestHeaders:
        """From ASGI header pairs (``scope["headers"]``)."""
        return cls([(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw])

    def __getitem__(self, name: str) -> str:
        wanted = name.lower()
        for field_name, value in self._fields:
            if field_name == wanted:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(name for name, _ in self._fields))

    def __len__(self) -> int:
        return len({name for name, _ in self._fields})

    def get_list(self, name: str) -> list[str]:
        """Every value of ``name``, in the order sent."""
        wanted = name.lower()
        return [value for field_name, value in self._fields if field_name == wanted]

    def __repr__(self) -> str:  # values may be credentials: never shown
        return f"RequestHeaders({sorted(self)})"


@dataclass(frozen=True, slots=True)
class AuthRequest:
    """What an :class:`AuthProvider` sees of one request: read-only, no body.

    ``path`` is the path as the router sees it (below any mount prefix, percent-decoded);
    ``client`` is the peer address of the connection (``None`` when the server does not
    know it). Behind a proxy the peer is the proxy: trusting a forwarded header such as
    ``X-Forwarded-For`` or a client-certificate header is the provider's decision.
    """

    method: str
    path: str
    headers: RequestHeaders
    client: str | None = None

    @property
    def authorization(self) -> str | None:
        """The first ``Authorization`` header, ``None`` when there is none."""
        return self.headers.get("authorization")

    @property
    def cookies(self) -> Mapping[str, str]:
        """The ``Cookie`` header(s) as name -> value (the first of a repeated name wins)."""
        cookies: dict[str, str] = {}
        for header in self.headers.get_list("cookie"):
            for pair in header.split(";"):
                name, equals, value = pair.strip().partition("=")
                if equals and name:
                    cookies.setdefault(name, value.strip().strip('"'))
        return cookies


class AuthProvider(ABC):
    """Resolves the caller of a request from what it sent (an :class:`AuthRequest`).

    ``auth.mode`` selects one provider when ``auth.enabled`` is true. The host constructs it
    once with ``options``: the validated ``auth`` section with every default applied, keys
    ``enabled``, ``mode``, ``auth_o_tron_url``, ``jwt_secret``, ``timeout_ms``,
    ``admin_roles`` (realm -> tuple of roles) and ``mode_options`` (the mode's own section
    ``auth.<mode>``, checked against ``options_schema`` with its ``default`` values filled
    in, whether or not the section is present). Any exception ``__init__`` raises fails
    startup (and ``aviso-server config check``) with one line naming the plugin and the key.
    """

    mode: ClassVar[str]
    """The ``auth.mode`` value that selects this provider."""

    challenges: ClassVar[tuple[str, ...]] = ("Bearer",)
    """``WWW-Authenticate`` values sent, one header field each and in order, with every 401."""

    options_schema: ClassVar[Mapping[str, Any] | None] = None
    """JSON Schema of the provider's own section ``auth.<mode>``; ``None`` forbids one.

    ``"default"`` values are filled in; a property marked ``"writeOnly": true`` is a secret,
    never shown by ``config check`` nor written to logs or error messages."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = options

    async def start(self) -> None:
        """Acquire resources (HTTP clients) on the serving event loop."""

    async def close(self) -> None:
        """Release what ``start`` acquired; called once after the HTTP server stopped."""

    @abstractmethod
    async def authenticate(self, request: AuthRequest) -> Caller | None:
        """Resolve one request's caller from its method, path, headers and client address.

        Return ``None`` for an anonymous request, raise :class:`MalformedCredentials` for
        unusable credentials and :class:`AuthError` when they are refused or cannot be
        checked.

        Providers written for aviso-py 0.x declared ``authenticate(self, authorization)``
        and received only the ``Authorization`` header value: the host still calls those
        that way (it recognises a first parameter named ``authorization`` or annotated as
        text) and logs a deprecation warning at startup.
        """


class AuthoriserMetrics:
    """Where an authoriser reports what only it can see: cache lookups, upstream fetches and
    its own detailed decision outcomes.

    The host passes a recorder that exports them (see ``docs/metrics.md``); this base
    records nothing, so an authoriser can always report. Decisions and their latency are
    measured by the host around every ``authorise``/``reauthorise`` call, whatever the
    authoriser reports.
    """

    def decision(self, outcome: str) -> None:
        """One evaluation ended with ``outcome`` (one of ``decision_outcomes``), in the
        authoriser's own words (``deny_destination``, not just "deny")."""

    def cache_lookup(self, hit: bool) -> None:
        """A lookup was served from the cache (``hit``) or had to wait for a fetch."""

    def fetch(self, outcome: str) -> None:
        """This evaluation performed one upstream fetch, with the merged ``outcome``."""

    def cache_size(self, size: int) -> None:
        """The cache now holds ``size`` entries."""


class ConfigurationProblem(ValueError):
    """A configuration rule an authoriser's :meth:`StreamAuthoriser.check_configuration`
    found broken: raised it stops startup, returned it is a startup warning.

    ``path`` is the key path from the document root (``("ecpds", "servers", 0)``); the host
    prints ``ecpds.servers[0]: <message>``.
    """

    def __init__(self, path: Sequence[str | int], message: str) -> None:
        super().__init__(message)
        self.path = tuple(path)
        self.message = message


@dataclass(frozen=True, slots=True)
class AuthoriserConfiguration:
    """What :meth:`StreamAuthoriser.check_configuration` may look at."""

    options: Mapping[str, Any]
    """The authoriser's section, shape-checked, with the schema's top-level defaults."""
    configured: bool
    """Whether the document has the section at all."""
    streams: tuple[str, ...]
    """Event types whose ``auth.plugins`` list this authoriser, in configuration order."""
    schemas: Mapping[str, Mapping[str, Any]]
    """The whole ``notification_schema`` section, shape-checked."""
    field_handlers: Mapping[str, type[FieldHandler]]
    """Registered field handler classes by ``type`` name."""


class StreamAuthoriser(ABC):
    """An extra read check a stream opts into through ``auth.plugins`` (e.g. ``ecpds``).

    Constructed once, only when some stream lists ``name``, with ``options`` (the top-level
    configuration section named ``name``, checked against ``options_schema``, its top-level
    ``default`` values filled in; ``{}`` when the class declares no schema) and ``metrics``
    to report to (a recorder of nothing when the host passes none).
    """

    name: ClassVar[str]
    """The name streams list in ``auth.plugins``, and of the top-level section it claims."""

    options_schema: ClassVar[Mapping[str, Any] | None] = None
    """JSON Schema (Draft 2020-12) of the top-level section ``name``, which the authoriser
    then owns; ``"default"`` of a top-level property fills in an absent key. ``None``: no
    section is claimed."""

    decision_outcomes: ClassVar[tuple[str, ...]] = ()
    """The outcomes reported through ``metrics.decision``, exported at 0 from startup."""

    fetch_outcomes: ClassVar[tuple[str, ...]] = ()
    """The outcomes reported through ``metrics.fetch``, exported at 0 from startup."""

    dedicated_metrics: ClassVar[bool] = False
    """Also export ``aviso_<name>_access_decisions_total{outcome}``,
    ``aviso_<name>_fetch_total{outcome}``, ``aviso_<name>_cache_hits_total``,
    ``aviso_<name>_cache_misses_total`` and ``aviso_<name>_cache_size`` (the names the
    specification pins for ``ecpds``), beside the generic ``aviso_authoriser_*`` families."""

    def __init__(
        self, options: Mapping[str, Any], metrics: AuthoriserMetrics | None = None
    ) -> None:
        self.options = options
        self.metrics = metrics or AuthoriserMetrics()

    @classmethod
    def check_configuration(
        cls, configuration: AuthoriserConfiguration
    ) -> Sequence[ConfigurationProblem]:
        """Rules beyond the section's shape, across sections (e.g. a key that must name a
        declared identifier field). Called at startup and by ``aviso-server config check``
        only when some stream lists the authoriser, after the host's stream and auth rules.
        Raise :class:`ConfigurationProblem` to refuse; return the ones that are warnings."""
        return ()

    async def start(self) -> None:
        """Acquire resources (HTTP clients) on the serving event loop."""

    async def close(self) -> None:
        """Release what ``start`` acquired; called once after the HTTP server stopped."""

    @property
    def recheck_seconds(self) -> float:
        """How often a stream this authoriser admitted is checked again while open (0: never)."""
        return 0.0

    async def reauthorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        """Check an open stream again: a 403 :class:`AuthError` ends it; any other failure
        leaves it open until the next check. By default the same as :meth:`authorise`."""
        await self.authorise(caller, event_type, identifier)

    @abstractmethod
    async def authorise(
        self, caller: Caller, event_type: str, identifier: Mapping[str, str]
    ) -> None:
        """Return when ``caller`` may read; raise :class:`AuthError` otherwise.

        Runs on watch/replay only, after identifier validation, never for admins.
        ``identifier`` holds the canonical value of every field the request named
        (wildcards included as ``*``; constraint objects as their compact JSON text).
        """
