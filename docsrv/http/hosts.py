"""Which Host headers a server answers (as Django's ALLOWED_HOSTS).

Without a configured public URL, v2 list links are built from the request's Host, and the
reply is cached and sent to everyone with the same key: a Host the server may not name would
put a foreign host into a public, cacheable body. Such a request gets ``400 Invalid Host
header.``. A pattern is a host name (any port), ``.example.org`` (it and every subdomain) or
``*`` (any host: for a server behind a proxy that checks Host itself).
"""

from __future__ import annotations

from collections.abc import Iterable

#: Allowed whatever else is configured: the names of this machine's loopback.
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_ADDRESSES = ("", "0.0.0.0", "::", "[::]")


def host_name(host: str) -> str:
    """The name part of a Host header, lower-cased, without its port (``[::1]:80`` -> ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host if end < 0 else host[: end + 1]
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() else host


def pattern_of(text: str) -> str:
    text = text.strip().lower()
    if ":" in text and not text.startswith("["):  # a bare IPv6 address
        return f"[{text}]"
    return text


class AllowedHosts:
    def __init__(self, patterns: Iterable[str]) -> None:
        chosen = {pattern_of(p) for p in patterns if p.strip()}
        self.any = "*" in chosen
        self.names = frozenset(p for p in chosen if not p.startswith("."))
        self.domains = tuple(p for p in chosen if p.startswith("."))

    def __contains__(self, host: str | None) -> bool:
        if self.any:
            return True
        if not host:
            return False
        name = host_name(host)
        return name in self.names or any(name.endswith(d) or name == d[1:] for d in self.domains)


def default_allowed_hosts(listen_host: str) -> tuple[str, ...]:
    """The listening address (unless it is a wildcard) and the loopback names."""
    own = () if listen_host in WILDCARD_ADDRESSES else (pattern_of(listen_host),)
    return tuple(dict.fromkeys((*own, *LOOPBACK)))
