"""The documentation site: `mkdocs build --strict` (what `make docs` runs) builds docs/ without a warning, which
covers the links between its pages and their anchors; README.md's links, which MkDocs does not read, are checked
here against the files and headings they name."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs gives the headings of a Markdown page (outside code fences)."""
    ids, fence = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"#{1,6} (.+)", line)):
            ids.add(slugify(m.group(1).strip(), "-"))
    return ids


def _broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in _anchors(file)):
            broken.append(target)
    return broken


def test_the_site_builds_without_a_warning(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr
    for page in ["", "install/", "cli/", "faults/", "cluster/", "performance/", "reproduction/"]:
        assert (tmp_path / "site" / page / "index.html").exists(), page


def test_every_docs_page_is_in_the_nav():
    import yaml

    nav = (ROOT / "mkdocs.yml").read_text()
    # Folders served beside their page but not listed (the committed reproduction report's tables).
    served = [line.strip().lstrip("/").removesuffix("**")
              for line in (yaml.safe_load(nav).get("not_in_nav") or "").splitlines() if line.strip()]
    assert served == ["reproduction/report/"]
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    pages = {page for page in pages if not page.startswith(tuple(served))}
    assert pages and all(page in nav for page in pages), sorted(p for p in pages if p not in nav)
    assert yaml.safe_load(nav)["theme"]["name"] == "mkdocs"


def test_readme_and_docs_links_resolve():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    assert {page.name: _broken_links(page) for page in pages if _broken_links(page)} == {}


def test_readme_links_every_docs_page_and_fits_on_a_few_screens():
    readme = (ROOT / "README.md").read_text()
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in LINK.findall(readme)}
    for page in (ROOT / "docs").glob("*.md"):
        assert page.name == "index.md" or page.resolve() in linked, page.name
    assert len(readme.splitlines()) < 100
    assert "make quickstart" in readme and "make test" in readme


def test_the_link_check_finds_a_broken_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n```\n# not a heading\n```\n")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#title) [gone](missing.md) [bad](a.md#not-a-heading) [web](https://x.org/y)")
    assert _broken_links(page) == ["missing.md", "a.md#not-a-heading"]
