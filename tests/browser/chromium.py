"""Debian's Chromium, headless, driven over the DevTools protocol (aiohttp's WebSocket client).

It reaches nothing but loopback: no host name resolves but localhost and 127.0.0.1, and the
browser's own background traffic (updates, sync, metrics) is switched off.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import shutil
import tempfile
from typing import Any

import aiohttp

FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-extensions",
    "--disable-default-apps", "--disable-domain-reliability", "--disable-client-side-phishing-detection", "--metrics-recording-only",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
]
_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")


def executable() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError("no chromium: `make test-browser` installs Debian's package (apt-get install chromium)")
    return found


class Page:
    """One tab: commands sent and answered in turn, events kept as they come."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self.socket = socket
        self.events: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for message in self.socket:
            data = json.loads(message.data)
            if "id" in data:
                self._waiting.pop(data["id"]).set_result(data)
            else:
                self.events.append(data)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        number = next(self._ids)
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        await self.socket.send_str(json.dumps({"id": number, "method": method, "params": params}))
        data = await asyncio.wait_for(answer, 30)
        if "error" in data:
            raise RuntimeError(f"{method}: {data['error']}")
        return data["result"]

    async def evaluate(self, expression: str) -> Any:
        result = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """The value of ``expression`` once it is truthy (polled)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while asyncio.get_running_loop().time() < deadline:
            value = await self.evaluate(expression)
            if value:
                return value
            await asyncio.sleep(0.05)
        raise AssertionError(f"not within {timeout} s: {expression}")


@contextlib.asynccontextmanager
async def chromium():
    """A headless Chromium on loopback, and a tab of it with console, log and network events on."""
    profile = tempfile.mkdtemp(prefix="docsrv-chromium-")
    process = await asyncio.create_subprocess_exec(executable(), *FLAGS, f"--user-data-dir={profile}", "about:blank",
                                                   stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        assert process.stderr is not None
        while True:
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            if not line:
                raise RuntimeError("chromium exited before it listened")
            found = _LISTENING.search(line)
            if found:
                break
        drain = asyncio.create_task(_drain(process.stderr))
        port = found.group(1).decode().split(":")[2].split("/")[0]
        async with aiohttp.ClientSession() as session:
            async with session.put(f"http://127.0.0.1:{port}/json/new?about:blank") as response:
                target = await response.json()
            async with session.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as socket:
                page = Page(socket)
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await page.send(f"{domain}.enable")
                yield page
        drain.cancel()
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()
        shutil.rmtree(profile, ignore_errors=True)


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass
