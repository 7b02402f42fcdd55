"""Rewrite the response examples of the OpenAPI document from the bundled demo snapshot.

    python tests/record_openapi_examples.py

A real server answers every example request of the routes (``docsrv/api/routes.py``); the bodies are written
to ``docsrv/api/openapi-examples.json``, which ``test_openapi.py`` replays against the server.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import orjson
from aiohttp import ClientSession

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docsrv.api.openapi import EXAMPLES_FILE, EXAMPLES_PUBLIC_URL, LIVE  # noqa: E402
from docsrv.api.routes import ROUTES  # noqa: E402
from docsrv.config import Settings  # noqa: E402
from helpers import example_request, running_server  # noqa: E402


async def record_examples(snapshot: Path) -> dict:
    """Answer every example request from ``snapshot`` with a real server; the bodies, by template."""
    examples = {}
    async with running_server(snapshot, Settings(public_url=EXAMPLES_PUBLIC_URL)) as base, ClientSession() as session:
        for route in ROUTES:
            if route.template in LIVE:
                continue
            async with session.get(base + example_request(route.template, route.doc)) as response:
                examples[route.template] = await response.json()
    return examples


if __name__ == "__main__":
    recorded = asyncio.run(record_examples(ROOT / "snapshots" / "demo"))
    EXAMPLES_FILE.write_bytes(orjson.dumps(recorded, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {len(recorded)} examples to {EXAMPLES_FILE.name}")
