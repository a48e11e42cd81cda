"""MkDocs hooks: generate the pages' figures before the build, check every link and picture after it.

``on_pre_build`` runs ``docs/gen_pages.py`` (figures from ``benchmarks/results/*.json``).
``on_post_build`` reads every built HTML page and fails the build on an internal link or a
picture whose file is not in the site: MkDocs' own validation checks Markdown links, not
the HTML the theme, the API reference and the generated report add.
"""

from __future__ import annotations

import importlib.util
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mkdocs.exceptions import PluginError

_HERE = Path(__file__).resolve().parent


def on_pre_build(config) -> None:  # noqa: ANN001 - MkDocs' config object
    spec = importlib.util.spec_from_file_location("gen_pages", _HERE / "gen_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (
                (tag == "a" and name == "href")
                or (tag in ("img", "script") and name == "src")
                or (tag == "link" and name == "href")
            ):
                self.targets.append(value)


def broken_links(site_dir: Path) -> list[str]:
    """``page: target`` for every internal href/src of the built site that names no file."""
    broken = []
    for page in sorted(site_dir.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(errors="replace"))
        for target in parser.targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("#", "data:", "mailto:")):
                continue
            path = unquote(parts.path)
            if not path:
                continue
            resolved = (site_dir / path.lstrip("/")) if path.startswith("/") else (page.parent / path)
            if resolved.is_dir():
                resolved = resolved / "index.html"
            if not resolved.exists():
                broken.append(f"{page.relative_to(site_dir)}: {target}")
    return broken


def on_post_build(config) -> None:  # noqa: ANN001
    broken = broken_links(Path(config["site_dir"]))
    if broken:
        raise PluginError("Broken internal links or pictures in the built site:\n  " + "\n  ".join(broken))
