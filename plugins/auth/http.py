"""The HTTP client the built-in auth plugins use for their upstream calls."""

from __future__ import annotations

from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # httpx is imported by the code that calls upstream: discovering plugins
    # (`aviso-server --help`) imports this module and has no use for httpx.
    import httpx


def upstream_client(
    timeout: httpx.Timeout, *, follow_redirects: bool = False, auth: httpx.Auth | None = None
) -> httpx.AsyncClient:
    """An async client that never keeps cookies.

    One client serves every user; if it kept cookies, a cookie set by the upstream's answer
    for one user would travel with every later user's call.
    """
    import httpx  # deferred: see the imports at the top

    return httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=follow_redirects,
        auth=auth,
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
    )
