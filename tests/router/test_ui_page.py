"""The search page's HTTP side, without a browser: /ui and its assets are served from the
package with a strict Content-Security-Policy, need no token, and stay out of the API schema.
The page itself is driven in a real browser in tests/app/serve/test_ui_browser.py."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from ragindex.router.auth import TokenVerifier
from ragindex.router.http import create_app
from ragindex.router.ui_page import ui_file


def ui_client(tmp_path: Path) -> httpx.AsyncClient:
    app = create_app(object(), TokenVerifier(tmp_path))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ui.test")


@pytest.mark.anyio
async def test_ui_is_html_with_a_strict_csp_and_no_token(tmp_path: Path) -> None:
    async with ui_client(tmp_path) as client:
        r = await client.get("/ui")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/html; charset=utf-8"
    csp = dict(p.strip().split(" ", 1) for p in r.headers["content-security-policy"].split(";"))
    assert csp["default-src"] == "'self'"
    assert csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["connect-src"] == "'self'" and csp["frame-ancestors"] == "'none'"
    assert "unsafe" not in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    # no inline script or style, and nothing from another origin
    assert re.findall(r"<script\b[^>]*>", r.text) == ['<script src="ui/ui.js" defer>']
    assert "<style" not in r.text and not re.search(r"\s(style|on\w+)=", r.text)
    assert not re.search(r"(src|href)=\"(\w+:)?//", r.text)  # nothing from another origin


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("path", "name", "media_type"),
    [("/ui/ui.js", "ui.js", "text/javascript"), ("/ui/ui.css", "ui.css", "text/css")],
)
async def test_the_pages_assets_are_served_from_the_package(
    tmp_path: Path, path: str, name: str, media_type: str
) -> None:
    async with ui_client(tmp_path) as client:
        r = await client.get(path)
    assert r.status_code == 200
    assert r.headers["content-type"] == f"{media_type}; charset=utf-8"
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.content == ui_file(name) and r.content
    assert "http://" not in r.text and "https://" not in r.text  # no CDN, nothing fetched


def test_the_script_never_puts_the_token_in_a_url() -> None:
    script = ui_file("ui.js").decode()
    assert "sessionStorage" in script and "localStorage" not in script
    assert '"Bearer " + token()' in script
    assert "location" not in script and "innerHTML" not in script and "eval(" not in script


@pytest.mark.anyio
async def test_the_page_is_not_part_of_the_api(tmp_path: Path) -> None:
    async with ui_client(tmp_path) as client:
        spec = (await client.get("/openapi.json")).json()
        assert not [p for p in spec["paths"] if p.startswith("/ui")]
        r = await client.post("/v1/search", json={"query": "x"})  # the data stays behind it
    assert r.status_code == 401
