"""Every relative link in README.md and docs/ reaches a file, and every #anchor a heading in it."""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _prose_lines(path: Path):
    """(line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            yield number, line


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for _, line in _prose_lines(path) if line.startswith("#")}


def _broken(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for number, line in _prose_lines(page):
        for target in LINK.findall(line):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
                broken.append(f"{page.relative_to(root)}:{number} -> {target}")
    return broken


def test_every_local_link_and_anchor_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 5
    broken = [b for page in pages for b in _broken(page)]
    assert broken == []


def test_the_checker_sees_a_broken_anchor(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nope) [gone](b.md)\n", encoding="utf-8")
    assert [b.split(" -> ")[1] for b in _broken(page, tmp_path)] == ["#nope", "b.md"]
