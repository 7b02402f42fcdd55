"""``docsrv snapshot pull --every``: a sidecar's loop. It pulls again and again, never dies of its
origin, and tends what runs beside its pulls: the kept state loaded ahead of the next change of
pages, and the fold of the kept changesets once there are ``kept.FOLD_CHANGESETS``.

The kept state and the fold's threshold are read from ``kept`` at each use, so that a test can
give a sidecar a cache and a threshold of its own."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path

from ..config import Deadlines
from ..utils import held_calls
from . import kept
from .fetch import describe
from .kept import CURRENT, Folded, current_name, finish_fold, fold_kept, kept_chain
from .pull import DEFAULT_DEADLINES, pull

log = logging.getLogger("docsrv")


#: Pauses between failed pulls with --every: doubling from the first to the last.
RETRY_SECONDS = (5.0, 300.0)


async def pull_every(
    url: str, into: Path, seconds: float, *, keep: int, progress: bool | None = None, deadlines: Deadlines = DEFAULT_DEADLINES
) -> None:
    """Pull now and every ``seconds``, each look ``seconds`` after the one before began (at once
    when a pull took longer, as one that built an index does: a pause after it would make a
    changeset published meanwhile wait that much more); a failure,
    whatever it is, is logged in one line and tried again after a pause that doubles with each
    failure in a row (from ``seconds`` or 5 s, whichever is shorter, to 5 minutes): a sidecar
    never dies of its origin. Every look is logged in one line (a pull, or that the snapshot is
    current), and so is a recovery."""
    sys.setswitchinterval(held_calls.GIL_SWITCH_SECONDS)  # its looks go on beside the state it loads (``tend_warming``)
    retry = Backoff(min(seconds, RETRY_SECONDS[0]))
    folding: asyncio.Task[Folded | None] | None = None
    warming: asyncio.Task[None] | None = None
    clock = asyncio.get_running_loop().time
    while True:
        began = clock()
        try:
            pulled = await pull(url, into, keep=keep, progress=progress, deadlines=deadlines, fold_at=None)
        except Exception as error:
            pause = retry.failed(clock())
            log.error("pull failed (%s); trying again in %.0f s", describe(error), pause)
            await asyncio.sleep(pause)
            continue
        pause = max(0.0, began + seconds - clock())
        if pulled.changed:
            log.info("pulled snapshot %s (%d files, %.1f MB in %.1f s); %s",
                     pulled.name, pulled.files, pulled.bytes / 1e6, pulled.seconds, pulled.where(into))
        else:  # a heartbeat: a sidecar's log shows it is alive and current
            log.info("snapshot %s is current; looking again in %.1f s", pulled.name, pause)
        if retry.failures:
            log.info("pulling works again after %d failure(s) in a row", retry.failures)
        retry.done()
        folding = await tend_fold(into, folding)
        warming = tend_warming(into, warming)
        await asyncio.sleep(pause)


def tend_warming(into: Path, warming: asyncio.Task[None] | None) -> asyncio.Task[None] | None:
    """What a sidecar's next changesets need, made in the background once ``current`` names a
    snapshot it is not of: the references each changeset is checked by (``kept.HeldReferences``),
    then the kept state (``replica.changeset_index.StateCache.warm``). The first changeset after a
    start, a snapshot pulled whole or a fold then costs what it changes, not a load of the
    snapshot too. A load that fails is logged in one line; the changeset then loads it itself."""
    if warming is not None:
        if not warming.done():
            return warming
        if not warming.cancelled() and isinstance(error := warming.exception(), Exception):
            log.error("loading the snapshot ahead of the next changeset failed (%s)", describe(error))
    current = current_name(into)
    if current is None:
        return None
    snapshot = into / current
    references, state = kept.HELD_REFERENCES.cold(snapshot), kept.INDEXED_STATE.cold(snapshot)
    if not (references or state):
        return None

    def warm() -> None:
        if references:
            kept.HELD_REFERENCES.warm(into)
        if state:
            kept.INDEXED_STATE.warm(snapshot)

    return asyncio.create_task(asyncio.to_thread(warm))


class Backoff:
    """When a sidecar tries again what failed (a pull, a fold): after a pause that doubles with
    each failure in a row, from ``first`` to the last of ``RETRY_SECONDS``."""

    def __init__(self, first: float = RETRY_SECONDS[0]) -> None:
        self.first = first
        self.failures = 0
        self.not_before = 0.0

    def failed(self, now: float) -> float:
        """Count a failure at ``now``; the pause before the next try."""
        self.failures += 1
        pause = min(self.first * 2 ** (self.failures - 1), RETRY_SECONDS[1])
        self.not_before = now + pause
        return pause

    def done(self) -> None:
        self.failures, self.not_before = 0, 0.0


#: The sidecar's fold retries: a fold that fails (a full disk, a damaged file) is not tried again
#: at every look.
FOLD_RETRY = Backoff()


async def tend_fold(into: Path, folding: asyncio.Task[Folded | None] | None) -> asyncio.Task[Folded | None] | None:
    """A sidecar's folding, in the background while it goes on keeping changesets: start one once
    ``kept.FOLD_CHANGESETS`` are kept (and ``FOLD_RETRY`` allows); once one is done, point
    ``current`` at its product."""
    now = time.monotonic()
    if folding is not None and folding.done():
        try:
            folded = folding.result()
        except Exception as error:
            pause = FOLD_RETRY.failed(now)
            log.error("folding the kept changesets failed (%s); trying again in %.0f s", describe(error), pause)
        else:
            FOLD_RETRY.done()
            if folded is not None and finish_fold(into, folded):
                log.info("folded the changesets kept after %s in %.1f s: %s -> %s", folded.source, folded.seconds, into / CURRENT,
                         folded.last.product)
        folding = None
    if folding is None and now >= FOLD_RETRY.not_before:
        current = current_name(into)
        chain = kept_chain(into, current) if current is not None else None
        if chain is not None and len(chain.changesets) >= kept.FOLD_CHANGESETS:
            folding = asyncio.create_task(asyncio.to_thread(fold_kept, into))
    return folding

