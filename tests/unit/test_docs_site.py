"""The documentation site, built as `make docs` builds it, works from disk and over HTTP.

From disk (``file://``) a browser does not turn a link to a folder into its ``index.html``,
and refuses to fetch the search index: so every link between pages must name an ``.html``
file that exists, every anchor must be on its page, and the search index must also be there
as a script (mkdocs-material's ``offline`` plugin), found from every page's ``base``. Over
HTTP the same files are served by a plain static server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from functools import partial
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytest.importorskip("mkdocs")
pytest.importorskip("material")

ROOT = Path(__file__).resolve().parents[2]
BUILD_SECONDS = 60
"""The budget of a build (``make docs``), generous for a loaded machine."""


class _Page(HTMLParser):
    """The links, element ids and the theme's configuration of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.nav_links: list[str] = []
        self.ids: set[str] = set()
        self.config = ""
        self._in_config = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("id"):
            self.ids.add(found["id"] or "")
        href = found.get("href")
        if tag == "a" and href is not None:
            self.links.append(href)
            if "md-nav__link" in (found.get("class") or "").split():
                self.nav_links.append(href)
        self._in_config = tag == "script" and found.get("id") == "__config"

    def handle_data(self, data: str) -> None:
        if self._in_config:
            self.config += data

    def handle_endtag(self, tag: str) -> None:
        self._in_config = False


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _is_internal(href: str) -> bool:
    parts = urlsplit(href)
    return not (parts.scheme or parts.netloc or href.startswith(("mailto:", "javascript:")))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from mkdocs.yml with ``--strict`` into a directory of its own."""
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=BUILD_SECONDS * 3,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return target


@pytest.fixture(scope="module")
def pages(site: Path) -> dict[Path, _Page]:
    """Every page but 404.html, which a server sends for any path (its links are absolute)."""
    return {path: _parse(path) for path in sorted(site.rglob("*.html")) if path.name != "404.html"}


def test_every_nav_link_is_an_html_file_that_exists(site: Path, pages: dict[Path, _Page]) -> None:
    nav = pages[site / "index.html"].nav_links
    assert len({href for href in nav if _is_internal(href)}) >= 20, nav
    for path, page in pages.items():
        for href in page.nav_links:
            if not _is_internal(href):
                continue
            target = urlsplit(href).path
            if not target:
                continue  # an anchor of the page itself
            assert target.endswith(".html"), f"{path.name}: nav link {href!r} is not a page file"
            assert (path.parent / unquote(target)).resolve().is_file(), f"{path.name}: {href!r}"


def test_every_link_between_pages_resolves_with_its_anchor(
    site: Path, pages: dict[Path, _Page]
) -> None:
    broken = []
    for path, page in pages.items():
        for href in page.links:
            if not _is_internal(href):
                continue
            parts = urlsplit(href)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir() or not target.exists():
                broken.append(f"{path.relative_to(site)}: {href}")
            elif (
                parts.fragment
                and target.suffix == ".html"
                and unquote(parts.fragment) not in pages[target].ids
            ):
                broken.append(f"{path.relative_to(site)}: {href} (no such anchor)")
    assert not broken, "\n".join(broken[:40])


def test_the_readmes_links_into_docs_resolve(site: Path, pages: dict[Path, _Page]) -> None:
    """The README is read on its own (not a page of the site): its links into docs/, with
    their anchors, resolve to pages of the built site."""
    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([^)\s]+))?\)", (ROOT / "README.md").read_text())
    assert len(links) >= 3
    for path, anchor in links:
        assert (ROOT / path).is_file(), path
        page = site / Path(path).relative_to("docs").with_suffix(".html")
        assert page in pages, path
        assert not anchor or anchor in pages[page].ids, f"{path}#{anchor}"


def test_search_works_from_disk(site: Path, pages: dict[Path, _Page]) -> None:
    script = (site / "search" / "search_index.js").read_text(encoding="utf-8")
    prefix = "var __index = "
    assert script.startswith(prefix)
    index = json.loads(script[len(prefix) :])
    located = {doc["location"].partition("#")[0] for doc in index["docs"]}
    assert {"architecture.html", "benchmarks.html", "reference/index.html"} <= located
    for path, page in pages.items():
        base = json.loads(page.config)["base"]
        found = (path.parent / base / "search" / "search_index.js").resolve()
        assert found == (site / "search" / "search_index.js").resolve(), path


@pytest.fixture
def http_root(site: Path) -> Iterator[str]:
    handler = partial(_QuietHandler, directory=str(site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return


def test_the_site_is_served_over_http(site: Path, pages: dict[Path, _Page], http_root: str) -> None:
    wanted = {"index.html", "search/search_index.json"}
    wanted |= {
        urlsplit(href).path
        for href in pages[site / "index.html"].nav_links
        if _is_internal(href) and urlsplit(href).path
    }
    for path in sorted(wanted):
        with urllib.request.urlopen(http_root + path, timeout=10) as answer:
            assert answer.status == 200, path
            assert answer.read(), path
