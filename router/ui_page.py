"""The search page at GET /ui: static HTML, JS and CSS shipped in the package (router/ui/).

The page holds no data and needs no token to load; every call it makes to /v1 carries the
token the user types as `Authorization: Bearer`, so what it shows is exactly what that token
may read. It is kept out of the OpenAPI document (it is no API), and its Content-Security-
Policy allows only this server's own script, style and endpoints: no inline script, nothing
from another origin.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none';"
    " frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
FILES = {
    "index.html": "text/html; charset=utf-8",
    "ui.js": "text/javascript; charset=utf-8",
    "ui.css": "text/css; charset=utf-8",
}


def ui_file(name: str) -> bytes:
    """One of the page's files, from the installed package (a wheel or an editable install)."""
    return (resources.files("ragindex.router") / "ui" / name).read_bytes()


def add_ui(app: FastAPI) -> None:
    """Serve the page at /ui and its two assets at /ui/ui.js and /ui/ui.css (read once)."""
    body = {name: ui_file(name) for name in FILES}

    def page(name: str) -> Response:
        return Response(body[name], media_type=FILES[name], headers=HEADERS)

    @app.get("/ui", include_in_schema=False)
    async def ui() -> Response:
        return page("index.html")

    @app.get("/ui/ui.js", include_in_schema=False)
    async def ui_js() -> Response:
        return page("ui.js")

    @app.get("/ui/ui.css", include_in_schema=False)
    async def ui_css() -> Response:
        return page("ui.css")
