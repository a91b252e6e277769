"""Topic codec: percent-encoding of tokens, strict decoding, and topic patterns.

It lives in the plugin API (not the host) because storage backends match patterns too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "WILDCARD",
    "TopicDecodeError",
    "TopicPattern",
    "build_topic",
    "decode_token",
    "decode_topic",
    "encode_token",
]

WILDCARD = "*"
# The four characters aviso-server escapes in a topic token (. * > %), plus the whitespace
# a NATS subject can never hold (the protocol line splits on space and tab and ends at
# CR/LF). No aviso server could ever store a subject with those four raw, so escaping them
# changes no existing subject; decoders already accept any ``%XX``.
_ENCODE = str.maketrans(
    {
        "%": "%25",
        ".": "%2E",
        "*": "%2A",
        ">": "%3E",
        " ": "%20",
        "\t": "%09",
        "\r": "%0D",
        "\n": "%0A",
    }
)
_HEX = frozenset("0123456789abcdefABCDEF")


class TopicDecodeError(ValueError):
    """A token holds a malformed percent escape or decodes to invalid UTF-8."""


def encode_token(token: str) -> str:
    """Escape the reserved characters ``. * > %`` and space, tab, CR, LF; keep the rest."""
    # Letters and digits alone (most tokens) hold none of them: one C check instead of a
    # table lookup per character.
    return token if token.isalnum() else token.translate(_ENCODE)


def build_topic(tokens: Sequence[str]) -> str:
    """Encode every token and join with ``.``."""
    return ".".join(encode_token(token) for token in tokens)


def decode_token(token: str) -> str:
    """Strict single-pass decoding: every ``%`` must start a two-hex-digit escape."""
    if "%" not in token:
        return token
    out = bytearray()
    i = 0
    while i < len(token):
        char = token[i]
        if char == "%":
            escape = token[i + 1 : i + 3]
            if len(escape) != 2 or not _HEX.issuperset(escape):
                raise TopicDecodeError(f"malformed percent escape in topic token {token!r}")
            out.append(int(escape, 16))
            i += 3
        else:
            out += char.encode()
            i += 1
    try:
        return out.decode()
    except UnicodeDecodeError as exc:
        raise TopicDecodeError(f"topic token {token!r} is not valid UTF-8") from exc


def decode_topic(topic: str) -> tuple[str, ...]:
    """Split an encoded topic on ``.`` and decode every token."""
    return tuple(decode_token(token) for token in topic.split("."))


@dataclass(frozen=True, slots=True)
class TopicPattern:
    """A decoded topic pattern: ``None`` marks a wildcard position.

    Matching is positional: same number of tokens, and every non-wildcard token equal to
    the decoded topic's token at that position.
    """

    tokens: tuple[str | None, ...]
    _stream_prefix: str | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )
    """``<base>.`` when only the base is literal (a whole stream, what a consumer follows):
    then a topic without escapes matches on its prefix and its number of tokens alone."""

    def __post_init__(self) -> None:
        base, rest = (self.tokens[0], self.tokens[1:]) if self.tokens else (None, ())
        if (
            base is not None
            and rest
            and all(token is None for token in rest)
            and encode_token(base) == base
        ):
            object.__setattr__(self, "_stream_prefix", base + ".")

    @classmethod
    def from_tokens(cls, tokens: Sequence[str | None]) -> TopicPattern:
        return cls(tuple(None if token == WILDCARD else token for token in tokens))

    @property
    def base(self) -> str | None:
        """The first token (the stream), or ``None`` when it is a wildcard."""
        return self.tokens[0]

    @property
    def display(self) -> str:
        """Decoded tokens joined by ``.`` with ``*`` for wildcards (used in SSE events)."""
        return ".".join(WILDCARD if token is None else token for token in self.tokens)

    @property
    def encoded(self) -> str:
        """The wire form: encoded tokens, literal ``*`` for wildcards."""
        return ".".join(WILDCARD if token is None else encode_token(token) for token in self.tokens)

    @property
    def literal_prefix(self) -> tuple[str, ...]:
        """The decoded tokens before the first wildcard (for coarse backend filters)."""
        prefix: list[str] = []
        for token in self.tokens:
            if token is None:
                break
            prefix.append(token)
        return tuple(prefix)

    def matches(self, topic: str) -> bool:
        """True when the encoded ``topic`` matches; an undecodable topic never matches."""
        prefix = self._stream_prefix
        if prefix is not None and "%" not in topic:
            return topic.startswith(prefix) and topic.count(".") == len(self.tokens) - 1
        raw = topic.split(".")
        if len(raw) != len(self.tokens):
            return False
        if "%" not in topic:  # every token is as decoded
            for want, token in zip(self.tokens, raw, strict=True):
                if want is not None and want != token:
                    return False
            return True
        try:
            # Every token is decoded, wildcard positions included: a topic that cannot be
            # decoded never matches.
            return all(
                decoded == want or want is None
                for want, decoded in zip(self.tokens, map(decode_token, raw), strict=True)
            )
        except TopicDecodeError:
            return False
