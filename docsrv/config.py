"""Settings of a serving docsrv: one frozen Struct, filled from the command line."""

from __future__ import annotations

import msgspec


class Settings(msgspec.Struct, frozen=True):
    #: Base of the absolute ``next``/``previous`` links of v2 lists, e.g. ``https://api.example.org``.
    #: Unset: each request's own scheme and Host.
    public_url: str | None = None
    #: ``Cache-Control`` of every 200: max-age, stale-while-revalidate and stale-if-error, in seconds.
    max_age: int = 300
    stale_while_revalidate: int = 60
    stale_if_error: int = 86400
    #: How many bytes of encoded responses each worker keeps ready to send.
    response_cache_bytes: int = 256 << 20
    #: Searches that may wait for the search thread in each worker; more get 503.
    search_queue: int = 64
    #: Host headers answered when ``public_url`` is unset (see ``http/hosts.py``).
    allowed_hosts: tuple[str, ...] = ("localhost", "127.0.0.1", "[::1]")

    @property
    def cache_control(self) -> str:
        return (
            f"public, max-age={self.max_age}, stale-while-revalidate={self.stale_while_revalidate}, "
            f"stale-if-error={self.stale_if_error}"
        )
