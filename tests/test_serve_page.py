"""The page of nmt-serve in a real headless browser: Debian's Chromium (scripts/install-browser.sh) driven by
Playwright. The page translates what is typed exactly as the API does, draws the attention of a translation as
a table of the right shape whose cells hold the API's weights, shows the server's errors and keeps working,
works under --url-root, and asks nothing of any other origin (it must work offline).

Without playwright or a chromium binary the tests skip, unless NMT_REQUIRE_BROWSER=1 (set by .ci/run) makes
that a failure."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterator, NoReturn
from urllib.parse import urlsplit

import pytest

from served_model import http, raw_test_sentences, serve

STATIC = Path(__file__).resolve().parents[1] / "nmt" / "serve" / "static"
TIMEOUT_MS = 120_000  # a translation on a busy 2-core machine; the tests never assert on time


def _missing(reason: str) -> NoReturn:
    if os.environ.get("NMT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (NMT_REQUIRE_BROWSER=1)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def model(peer_export) -> Path:
    return peer_export[2]


@pytest.fixture(scope="module")
def server(model: Path) -> Iterator[Any]:
    yield from serve([str(model), "--threads", "1"])


@pytest.fixture(scope="module")
def rooted_server(model: Path) -> Iterator[Any]:
    yield from serve([str(model), "--threads", "1", "--url-root", "/translator"])


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed: pip install -e '.[dev]'")
    executable = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(executable).is_file():
        _missing("no chromium binary: run scripts/install-browser.sh (Debian's chromium package)")
    with sync_playwright() as playwright:
        # --no-sandbox: Chromium refuses its sandbox when run as root, as CI does
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        yield launched
        launched.close()


class Page:
    """A browser tab on the server's page that records every URL it requests."""

    def __init__(self, browser: Any, url: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 800})
        self.tab = self.context.new_page()
        self.tab.set_default_timeout(TIMEOUT_MS)
        self.requested: list[str] = []
        self.statuses: dict[str, int] = {}
        self.tab.on("request", lambda request: self.requested.append(request.url))
        self.tab.on("response", self._answered)
        self.tab.goto(url)
        # the header names the languages once GET models answered
        self.tab.wait_for_function("document.getElementById('model').dataset.sourceLang !== undefined")

    def _answered(self, response: Any) -> None:
        self.statuses[response.url] = response.status

    def translate(self, text: str, beam: int = 5, nbest: int = 1, *, keys: bool = False) -> None:
        self.tab.fill("#source", text)
        self.tab.fill("#beam", str(beam))
        self.tab.fill("#nbest", str(nbest))
        answered = int(self.tab.get_attribute("body", "data-answered") or 0)
        if keys:
            self.tab.press("#source", "Control+Enter")
        else:
            self.tab.click("#translate")
        self.tab.wait_for_function(f"Number(document.body.dataset.answered) > {answered}")

    def texts(self, selector: str) -> list[str]:
        return self.tab.locator(selector).all_text_contents()

    def table(self) -> dict[str, Any]:
        """The heatmap table: its layer and head, header tokens, row tokens and the weights of its cells."""
        return self.tab.eval_on_selector("#heatmap table", """table => ({
            layer: table.dataset.layer, head: table.dataset.head,
            columns: [...table.querySelectorAll('thead th.source-token')].map(th => th.textContent),
            rows: [...table.querySelectorAll('tbody tr.target-row')].map(tr => tr.querySelector('th').textContent),
            weights: [...table.querySelectorAll('tbody tr.target-row')].map(
                tr => [...tr.querySelectorAll('td.weight')].map(td => Number(td.dataset.weight))),
        })""")

    def close(self, origin: str) -> None:
        """Closes the tab, after checking every request went to ``origin`` (nothing from a CDN)."""
        self.context.close()
        elsewhere = [u for u in self.requested if not u.startswith("data:") and _origin(u) != _origin(origin)]
        assert not elsewhere, f"the page requested URLs outside the server: {elsewhere}"


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _api(server: Any, text: list[str], **options: Any) -> dict[str, Any]:
    status, answer, _ = http(server.base + "/v1/translate", {"text": text, "attention": True, **options})
    assert status == 200, answer
    return answer


def _close(got: list[list[float]], want: list[list[float]], tolerance: float = 2e-4) -> bool:
    return len(got) == len(want) and all(
        len(g) == len(w) and all(abs(a - b) <= tolerance for a, b in zip(g, w)) for g, w in zip(got, want))


def _mean(heads: list[list[list[float]]]) -> list[list[float]]:
    return [[sum(h[t][s] for h in heads) / len(heads) for s in range(len(heads[0][0]))]
            for t in range(len(heads[0]))]


def test_static_files_name_no_other_origin():
    for path in STATIC.iterdir():
        assert "://" not in path.read_text(encoding="utf-8"), f"{path.name} names an absolute URL"


@pytest.mark.slow  # a real nmt-serve and a headless Chromium
def test_page_translates_and_draws_the_attention(browser: Any, server: Any, tmp_path: Path):
    sentences = raw_test_sentences(2)  # the first: "A man in an orange hat starring at something."
    found = _api(server, sentences, beam=5, nbest=2)["translations"]
    best, attention = found[0]["hypotheses"][0], found[0]["attention"]
    source_tokens = found[0]["source_tokens"]
    page = Page(browser, server.url + "/")
    tab = page.tab
    assert tab.text_content("#model-langs") == "en \u2192 de"
    assert tab.get_attribute("#model", "data-source-lang") == "en"
    assert tab.get_attribute("#model", "data-target-lang") == "de"
    assert "parameters" in tab.text_content("#model-params")

    page.translate("\n".join(sentences), beam=5, nbest=2)
    assert tab.is_hidden("#error")
    assert page.texts("#translations .source") == sentences
    assert page.texts("#translations .hypothesis.best .text") == [t["hypotheses"][0]["text"] for t in found]
    assert page.texts("#translations .alternative .text") == [t["hypotheses"][1]["text"] for t in found]

    tab.click("#translations li.translation[data-index='0'] .hypothesis.best")
    tab.wait_for_selector("#heatmap table")
    table = page.table()
    # one row per target token and </s>, one column per source token and </s>
    rows = tab.locator("#heatmap table tbody tr.target-row")
    assert rows.count() == len(best["tokens"]) + 1
    assert rows.first.locator("td.weight").count() == len(source_tokens) + 1
    assert all(len(row) == len(source_tokens) + 1 for row in table["weights"])
    assert table["rows"] == [*best["tokens"], "</s>"]
    assert table["columns"] == [*source_tokens, "</s>"]
    # it opens on the mean of the last layer's heads, one thumbnail per head and one for the mean
    last = attention["layers"] - 1
    assert (table["layer"], table["head"]) == (str(last), "avg")
    assert _close(table["weights"], _mean(attention["weights"][last]))
    assert tab.locator("#heads .thumbnail canvas").count() == attention["heads"] + 1

    tab.select_option("#layer", value="0")
    tab.select_option("#head", value="1")
    switched = page.table()
    assert (switched["layer"], switched["head"]) == ("0", "1")
    assert switched["weights"] != table["weights"]
    assert _close(switched["weights"], attention["weights"][0][1])
    tab.click("#heads .thumbnail[data-head='2']")
    assert page.table()["head"] == "2" and tab.input_value("#head") == "2"
    assert tab.get_attribute("#heads .thumbnail[data-head='2']", "aria-pressed") == "true"
    assert _close(page.table()["weights"], attention["weights"][0][2])
    tab.select_option("#layer", value=str(last))
    tab.click("#heads .thumbnail[data-head='avg']")
    assert page.table() == table

    shot = tmp_path / "serve-page.png"
    tab.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("NMT_PAGE_SCREENSHOT"):  # where to save it for the docs (docs/images/serve-page.png)
        tab.screenshot(path=os.environ["NMT_PAGE_SCREENSHOT"], full_page=True)
    page.close(server.url)


@pytest.mark.slow  # a real nmt-serve and a headless Chromium
def test_page_shows_the_server_error_and_keeps_working(browser: Any, server: Any):
    sentence = raw_test_sentences(5)[4]
    too_long = "a" * 5000
    status, refused, _ = http(server.base + "/v1/translate", {"text": [too_long]})
    assert status == 413
    page = Page(browser, server.url + "/")
    tab = page.tab

    page.translate(too_long)
    assert tab.is_visible("#error")
    assert tab.text_content("#error") == refused["error"]
    assert tab.get_attribute("#error", "data-status") == "413"
    assert tab.locator("#translations li.translation").count() == 0

    page.translate(f"\n{sentence}\n\n", keys=True)  # blank lines are skipped; Ctrl+Enter translates
    assert tab.is_hidden("#error")
    want = _api(server, [sentence], beam=5)["translations"][0]["hypotheses"][0]["text"]
    assert page.texts("#translations .hypothesis.best .text") == [want]
    page.close(server.url)


@pytest.mark.slow  # a real nmt-serve and a headless Chromium
def test_page_works_under_a_url_root(browser: Any, rooted_server: Any):
    assert urlsplit(rooted_server.url).path == "/translator"
    sentences = raw_test_sentences(2)
    found = _api(rooted_server, sentences, beam=4, nbest=2)["translations"]
    page = Page(browser, rooted_server.url)  # without the slash: redirected to /translator/
    tab = page.tab
    assert tab.url == rooted_server.url + "/"
    for asset in ("app.js", "style.css"):
        assert page.statuses.get(f"{rooted_server.url}/static/{asset}") == 200
    assert tab.text_content("#model-langs") == "en \u2192 de"

    page.translate("\n".join(sentences), beam=4, nbest=2)
    assert tab.is_hidden("#error")
    assert page.texts("#translations .hypothesis.best .text") == [t["hypotheses"][0]["text"] for t in found]
    assert page.texts("#translations .alternative .text") == [t["hypotheses"][1]["text"] for t in found]
    tab.click("#translations li.translation[data-index='1'] .hypothesis.best")
    assert len(page.table()["rows"]) == len(found[1]["hypotheses"][0]["tokens"]) + 1
    page.close(rooted_server.url)
