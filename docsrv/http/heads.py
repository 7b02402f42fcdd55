"""Request heads as the fast lane reads them: with httptools (llhttp, read strictly, as in
aiohttp's own parser), a connection's parser kept from one request to the next. A head the lane
does not fully understand reads as None: it is aiohttp's to read (``fast_lane.py``)."""

from __future__ import annotations

from typing import NamedTuple

import httptools

from .limits import MAX_HEADERS, MAX_LINE_BYTES

#: The longest header block the lane reads (aiohttp's limit on one line): a longer one is
#: aiohttp's to judge.
MAX_HEAD = MAX_LINE_BYTES
#: Where a head ends.
HEAD_END = b"\r\n\r\n"
_PARSER_ERRORS = (httptools.HttpParserError, httptools.HttpParserUpgrade)
#: Headers that mean a body or a protocol switch, or that aiohttp refuses outright: aiohttp's to handle.
#: ``proxy-connection`` too: llhttp (and so aiohttp) reads it as ``connection``.
_AIOHTTP_ONLY = frozenset(
    (b"content-length", b"transfer-encoding", b"upgrade", b"expect", b"sec-websocket-key1", b"proxy-connection")
)
_OWS = b" \t"


class Head(NamedTuple):
    """A request head as the lane reads it."""

    method: bytes
    target: bytes
    http11: bool
    #: Whether the connection stays open after the answer.
    keep_alive: bool
    #: By lower-case name; each value as llhttp gives it (leading white space dropped).
    headers: dict[bytes, bytes]


#: Made without the named tuple's ``__new__`` (a Python function): the head of every request.
_new_head = tuple.__new__


def value(raw: bytes) -> str:
    """A header value as aiohttp gives it: without the white space llhttp leaves at its end."""
    return raw.rstrip(_OWS).decode()


class HeadReader:
    """A connection's httptools parser and its callbacks, kept from one request to the next
    (made anew after an error or a request that closes the connection)."""

    __slots__ = ("headers", "on_url", "parser", "targets")

    def __init__(self) -> None:
        #: The request target llhttp read (a C method as the callback: no Python call for it).
        self.targets: list[bytes] = []
        self.on_url = self.targets.append
        self.headers: dict[bytes, bytes] = {}
        self.parser = httptools.HttpRequestParser(self)

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.lower()] = value

    def restart(self) -> None:
        """Read on from the start of a request (after an error, a closing request, or a read
        that went past the request it was meant to read)."""
        self.parser = httptools.HttpRequestParser(self)

    def read(self, block: bytes) -> Head | None:
        """A header block that ends with a blank line, read; or None when the lane does not
        fully understand it: then aiohttp, whose parser may refuse what llhttp here accepts or
        read it otherwise, must see it and everything around it."""
        if len(block) > MAX_HEAD or not block.isascii():
            return None
        headers = self.headers = {}
        targets = self.targets
        targets.clear()
        parser = self.parser
        try:
            parser.feed_data(block)
        except _PARSER_ERRORS:
            self.restart()
            return None
        if len(targets) != 1 or targets[0][:1] != b"/":  # an absolute-form target, or "*": aiohttp's to read
            return None
        count = len(headers)
        # A header named twice is one entry here: aiohttp reads the first, or refuses the request.
        if count != block.count(b"\r\n") - 2 or count > MAX_HEADERS or not _AIOHTTP_ONLY.isdisjoint(headers):
            return None
        method = parser.get_method()
        url = targets[0]
        at = len(method) + len(url) + 2  # llhttp took the request line as method SP target SP version
        version = block[at:at + 8]
        if version == b"HTTP/1.1":
            if b"host" not in headers:  # aiohttp's parser refuses it
                return None
            http11 = True
        elif version == b"HTTP/1.0":
            http11 = False
        else:
            return None
        # Keep-alive from the Connection header, not from httptools' should_keep_alive(), which
        # llhttp has already reset by the time a message is complete.
        connection = headers.get(b"connection")
        if connection is not None:
            connection = connection.rstrip(_OWS).lower()
            if connection != b"close" and connection != b"keep-alive":
                return None  # a list of options: aiohttp's to read
        keep_alive = connection != b"close" if http11 else connection == b"keep-alive"
        if not keep_alive:  # llhttp refuses whatever follows a closing request
            self.restart()
        return _new_head(Head, (method, url, http11, keep_alive, headers))


class _Partial:
    """Callbacks that keep nothing: a request not yet whole is only checked."""

    def on_url(self, url: bytes) -> None:
        pass


_NOTHING = _Partial()


def plausible_start(partial: bytes) -> bool:
    """Whether bytes that do not yet hold a whole header block can begin a request the lane
    would read (else aiohttp's parser may refuse them at once, and with them what came before)."""
    if len(partial) > MAX_HEAD or not partial.isascii():
        return False
    try:
        httptools.HttpRequestParser(_NOTHING).feed_data(partial)
    except _PARSER_ERRORS:
        return False
    return True


def one_plain_get(data: bytes) -> bool:
    """Whether ``data``, which ends with a blank line, holds the head of one GET or HEAD and no
    body or upgrade: what aiohttp may be handed unread, knowing that it answers exactly one
    request and then expects the start of the next."""
    if not (data.startswith(b"GET ") or data.startswith(b"HEAD ")) or data.count(HEAD_END) != 1:
        return False
    lowered = data.lower()
    return b"content-length" not in lowered and b"transfer-encoding" not in lowered and b"upgrade" not in lowered
