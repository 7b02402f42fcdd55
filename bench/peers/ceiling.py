"""The framework's ceiling: a minimal aiohttp application answering pre-encoded bodies by path.

`python bench/peers/ceiling.py PORT BODIES_DIR`: every file under BODIES_DIR is served at its
relative path, read once at start-up; nothing is computed per request. It runs on uvloop, as
docsrv does, so the two differ only in what the handler does.
"""

import sys
from pathlib import Path

import uvloop
from aiohttp import web


def main() -> None:
    port, root = int(sys.argv[1]), Path(sys.argv[2])
    bodies = {"/" + str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    async def handler(request: web.Request) -> web.Response:
        body = bodies.get(request.path)
        if body is None:
            raise web.HTTPNotFound()
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=uvloop.new_event_loop())


if __name__ == "__main__":
    main()
