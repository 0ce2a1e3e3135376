"""The search page in a real headless browser (Debian's Chromium through its chromedriver and
Selenium) over the real local Serve app: log in with a token, search, read the cited hits and
the timings bar, ask for an answer, see a bad filter refused with the server's own words. It
keeps a screenshot as an artifact, ${RAGINDEX_CACHE:-~/.cache/ragindex}/reports/ui-search.png.

scripts/setup_debian.sh installs the browser (scripts/test.sh runs it).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ragindex.router.auth import create_token

if TYPE_CHECKING:  # fixtures come from conftest.py; pytest's importlib mode cannot import it
    from conftest import ServedApp

pytestmark = [pytest.mark.serve, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_S = 60  # each wait for the page; a search on two busy cores takes well under a second

DOCS = [
    {
        "source": "wiki",
        "doc_id": "lighthouse",
        "title": "Lighthouses",
        "text": "A lighthouse is a tower with a bright lamp that guides ships at night"
        " along dangerous coasts and harbour entrances.",
    },
    {
        "source": "wiki",
        "doc_id": "volcano",
        "title": "Volcanoes",
        "text": "A volcano is a rupture in the crust of a planet where lava, ash and gases"
        " escape from a magma chamber below the surface.",
    },
    {
        "source": "recipes",
        "doc_id": "bread",
        "title": "Bread",
        "text": "Bread is baked from a dough of flour and water, leavened with yeast"
        " and shaped into loaves before it goes into a hot oven.",
    },
]
QUERY = "What guides ships along dangerous coasts?"
BAD_FILTER = {"field": "source", "gt": "wiki"}  # `source` has no range: the server says so


def reports_dir() -> Path:
    cache = Path(os.environ.get("RAGINDEX_CACHE", Path.home() / ".cache" / "ragindex"))
    return cache / "reports"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: run scripts/setup_debian.sh")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,1400",
        "--no-first-run",
        "--disable-extensions",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit driver: Selenium Manager would try to download one.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, tmp_path: Path) -> Path:
    kept = reports_dir() / "ui-search.png"
    kept.parent.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(tmp_path / "ui-search.png"))
    shutil.copyfile(tmp_path / "ui-search.png", kept)
    print(f"screenshot: {kept} (and {tmp_path / 'ui-search.png'})")
    return kept


def test_log_in_search_see_cited_hits_and_timings_in_a_browser(
    served: ServedApp, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    token = create_token(served.data_dir, "uitest")
    with served.client(token) as client:
        r = client.post(
            "/v1/documents",
            json={"documents": DOCS},
            params={"wait": "true", "wait_timeout_s": "30"},
        )
        assert r.status_code == 202 and r.json()["applied"] is True, r.text

    driver = browser
    wait = WebDriverWait(driver, WAIT_S)

    def idle() -> None:
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-busy") is None)

    def text(css: str) -> str:
        return str(driver.find_element(By.CSS_SELECTOR, css).text)

    driver.get(f"{served.url}/ui")
    assert driver.title == "ragindex search"

    # log in: the token goes to sessionStorage, and /v1/stats (with it) names the tenant
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login-button").click()
    wait.until(ec.text_to_be_present_in_element((By.ID, "who"), "tenant uitest"))
    assert "3 documents" in text("#who")
    assert driver.execute_script("return sessionStorage.getItem('ragindex.token')") == token
    assert token not in driver.current_url

    # search: the lighthouse first, with its source, doc id and chunk id
    driver.find_element(By.ID, "query").send_keys(QUERY)
    Select(driver.find_element(By.ID, "mode")).select_by_value("hybrid")
    k = driver.find_element(By.ID, "k")
    k.clear()
    k.send_keys("3")
    driver.find_element(By.ID, "search-button").click()
    wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "#hits .hit")))
    idle()
    hits = driver.find_elements(By.CSS_SELECTOR, "#hits .hit")
    assert len(hits) == 3
    first = hits[0]
    assert first.get_attribute("data-chunk-id") == "wiki:lighthouse:0"
    assert first.find_element(By.CSS_SELECTOR, ".title").text == "Lighthouses"
    assert first.find_element(By.CSS_SELECTOR, ".source").text == "wiki/lighthouse"
    assert first.find_element(By.CSS_SELECTOR, ".chunk-id").text == "wiki:lighthouse:0"
    assert "guides ships at night" in first.find_element(By.CSS_SELECTOR, ".text").text
    assert "dense #" in first.find_element(By.CSS_SELECTOR, ".ranks").text
    assert "lexical #1" in first.find_element(By.CSS_SELECTOR, ".ranks").text
    assert not driver.find_element(By.ID, "error").is_displayed()

    # the timings: one bar segment per stage the server reported (legs_wall is no stage)
    assert driver.find_element(By.ID, "timings").is_displayed()
    with served.client(token) as client:
        same = client.post("/v1/search", json={"query": QUERY, "k": 3}).json()
    stages = [s for s in same["timings_ms"] if s != "legs_wall"]
    segments = driver.find_elements(By.CSS_SELECTOR, "#timings .segment")
    assert stages and sorted(s.get_attribute("data-stage") for s in segments) == sorted(stages)
    assert len(driver.find_elements(By.CSS_SELECTOR, "#timings-legend li")) == len(stages)
    assert {"embed", "dense", "lexical", "fusion"} <= set(stages)  # a hybrid search's stages
    widths = [s.size["width"] for s in segments]
    assert all(w >= 1 for w in widths)
    bar = driver.find_element(By.ID, "timings").size["width"]
    assert abs(sum(widths) - bar) <= len(widths) * 2 + 2  # the segments fill the bar

    # the answer: a citation id shown, linked to the hit it cites
    driver.find_element(By.ID, "answer-button").click()
    wait.until(ec.visibility_of_element_located((By.ID, "answer-panel")))
    idle()
    assert "[1]" in text("#answer"), text("#answer")
    links = driver.find_elements(By.CSS_SELECTOR, "#citations a.citation")
    assert links, text("#citations")
    cited = links[0].text
    assert cited.startswith("wiki:lighthouse:")
    assert cited in [h.get_attribute("data-chunk-id") for h in hits]
    links[0].click()
    assert "cited" in str(first.get_attribute("class"))
    shot = screenshot(driver, tmp_path)
    assert shot.stat().st_size > 10_000

    # a filter the grammar refuses: the server's 422 detail, shown as it said it
    driver.find_element(By.ID, "filter").send_keys(json.dumps(BAD_FILTER))
    driver.find_element(By.ID, "search-button").click()
    wait.until(ec.visibility_of_element_located((By.ID, "error")))
    with served.client(token) as client:
        refused = client.post("/v1/search", json={"query": QUERY, "filter": BAD_FILTER})
    assert refused.status_code == 422
    shown = text("#error")  # "422 <the reason phrase>: <detail>"
    assert shown.startswith("422 ") and shown.endswith(": " + refused.json()["detail"]), shown
    assert driver.find_element(By.ID, "error").get_attribute("data-status") == "422"

    # no console errors (a CSP violation would be one)
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert [e for e in severe if "422" not in e["message"]] == []


def test_a_wrong_token_is_refused_with_the_servers_detail(served: ServedApp, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = browser
    driver.get(f"{served.url}/ui")
    driver.execute_script("sessionStorage.clear()")
    driver.refresh()
    driver.find_element(By.ID, "token").send_keys("rgx_not-a-token")
    driver.find_element(By.ID, "login-button").click()
    WebDriverWait(driver, WAIT_S).until(ec.visibility_of_element_located((By.ID, "error")))
    with served.client("rgx_not-a-token") as client:
        detail = client.get("/v1/stats").json()["detail"]
    error = driver.find_element(By.ID, "error")
    assert error.text.startswith("401 ") and error.text.endswith(": " + detail), error.text
    assert error.get_attribute("data-status") == "401"
    assert driver.execute_script("return sessionStorage.getItem('ragindex.token')") is None
    assert driver.find_element(By.ID, "who").text == "not logged in"
