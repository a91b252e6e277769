"""What an auth provider sees of a request, and how providers of the old signature are called.

Before aviso-py 1.0 a provider's ``authenticate`` received the ``Authorization`` header value
only. Such providers keep working: the host recognises the old signature once, at startup,
hands them ``request.authorization`` and logs a deprecation warning.
"""

from __future__ import annotations

import inspect

from starlette.types import Scope

from aviso_plugins.types import AuthProvider, AuthRequest, RequestHeaders

_TEXT_ANNOTATIONS = frozenset({"str", "str|None", "None|str", "Optional[str]"})

DEPRECATED_SIGNATURE = (
    "auth provider {mode!r} declares authenticate(authorization), which receives only the "
    "Authorization header; it is deprecated: declare authenticate(self, request: AuthRequest)"
)


def auth_request(scope: Scope, path: str) -> AuthRequest:
    """The read-only view of one HTTP request; ``path`` as the router sees it."""
    client = scope.get("client")
    return AuthRequest(
        method=scope["method"],
        path=path,
        headers=RequestHeaders.from_raw(scope.get("headers", ())),
        client=client[0] if client else None,
    )


def takes_authorization_header(provider: type[AuthProvider]) -> bool:
    """Whether ``authenticate``'s first parameter is the old one: named ``authorization``,
    or annotated as text (``str | None``)."""
    parameters = list(inspect.signature(provider.authenticate).parameters.values())[1:]
    if not parameters:
        return False
    first = parameters[0]
    if first.name == "authorization":
        return True
    annotation = first.annotation
    if isinstance(annotation, str):  # ``from __future__ import annotations``
        text = annotation
    elif annotation is str:
        text = "str"
    else:
        text = repr(annotation)
    return text.replace(" ", "").replace("typing.", "") in _TEXT_ANNOTATIONS
