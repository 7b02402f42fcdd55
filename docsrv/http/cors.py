"""CORS: which origins are answered with credentials (DECISIONS.md section 5).

The original's in-page search (its ``doc-embed`` script) sends its request with credentials,
and a browser refuses a credentialed answer whose ``Access-Control-Allow-Origin`` is ``*``. The
original (django-cors-headers, ``CORS_ALLOW_CREDENTIALS``) echoed the origins it trusted; so
does docsrv: a request whose ``Origin`` is a docs origin (``http`` or ``https``, the docs host, a
subdomain of it, or a served project's canonical host, any port) gets that origin back with
``Access-Control-Allow-Credentials: true``; any other request gets ``*``. The answer varies with
``Origin``, so every reply says ``Vary: Origin`` (``api/state.py``).

Replies are made once and keep no CORS header of their own: the dispatcher adds ``headers()``
and the fast lane writes ``wire()`` after a reply's own headers. Both are looked up per
``Origin`` value in a bounded table, so a flood of made-up origins costs a bounded amount of
memory, and a browser's one origin costs one dictionary lookup a request.
"""

from __future__ import annotations

import re

from .hosts import host_name

ALLOW_ORIGIN = "Access-Control-Allow-Origin"
ALLOW_CREDENTIALS = "Access-Control-Allow-Credentials"
#: The answer to a request from anywhere else, or with no ``Origin``.
ANYONE = {ALLOW_ORIGIN: "*"}
ANYONE_WIRE = b"Access-Control-Allow-Origin: *\r\n"
#: Origins whose answer is kept; past it the table is emptied (the origins in use come back).
MAX_ORIGINS = 1024
#: A serialised origin as browsers send it: a scheme, a host name or an IP literal, a port.
_ORIGIN = re.compile(r"(?i)(https?)://([a-z0-9.-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")
#: The request headers a credentialed preflight may ask for: django-cors-headers' default list
#: (``*`` means "any" only to requests without credentials).
PREFLIGHT_HEADERS = "accept, accept-encoding, authorization, content-type, dnt, origin, user-agent, x-csrftoken, x-requested-with"


class Cors:
    """The CORS answer of one snapshot, by its docs host. A project's canonical URL is its
    default version's docs URL (``Store.version_url``): its host is the docs host too."""

    def __init__(self, docs_host: str) -> None:
        self.docs_host = host_name(docs_host)
        self._suffix = "." + self.docs_host
        self._headers: dict[str, dict[str, str]] = {}
        self._wire: dict[bytes, bytes] = {}

    def trusted(self, origin: str) -> bool:
        """Whether ``origin`` (an ``Origin`` header's value) is a docs origin."""
        match = _ORIGIN.fullmatch(origin)
        if match is None:
            return False
        host = match.group(2).lower()
        return host == self.docs_host or host.endswith(self._suffix)

    def headers(self, origin: str | None) -> dict[str, str]:
        """The CORS headers of a reply to a request with this ``Origin`` (None: none sent)."""
        if origin is None:
            return ANYONE
        found = self._headers.get(origin)
        if found is None:
            found = {ALLOW_ORIGIN: origin, ALLOW_CREDENTIALS: "true"} if self.trusted(origin) else ANYONE
            if len(self._headers) >= MAX_ORIGINS:
                self._headers.clear()
            self._headers[origin] = found
        return found

    def wire(self, origin: bytes | None) -> bytes:
        """``headers()`` as the fast lane writes them (``origin`` as llhttp read it)."""
        if origin is None:
            return ANYONE_WIRE
        found = self._wire.get(origin)
        if found is None:
            # As aiohttp gives the value: white space at its end dropped; only ASCII reaches the lane.
            found = "".join(f"{name}: {value}\r\n" for name, value in self.headers(origin.rstrip(b" \t").decode()).items()).encode()
            if len(self._wire) >= MAX_ORIGINS:
                self._wire.clear()
            self._wire[origin] = found
        return found

    def preflight(self, origin: str | None) -> dict[str, str]:
        """The CORS headers of a preflight's answer: as ``headers()``, with the request headers a
        credentialed request may send named (``*`` is no wildcard with credentials)."""
        found = self.headers(origin)
        return {**found, "Access-Control-Allow-Headers": PREFLIGHT_HEADERS} if ALLOW_CREDENTIALS in found else found
