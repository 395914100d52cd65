"""Every relative link of README.md and docs/*.md resolves (issue 25): the file it names
exists, and its ``#anchor`` is a heading of that file (as GitHub makes heading anchors)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

# [text](target) and ![alt](target), the target up to a space (a title) or ")".
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation other than
    ``-`` and ``_`` removed, spaces made ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown file (a repeated heading gets -1, -2, ...)."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for line in prose_lines(path.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        n = counts.get(base, 0)
        counts[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    """The link targets of a Markdown file outside code (fenced blocks and code spans)."""
    targets = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        line = re.sub(r"`[^`]*`", "", line)
        targets += [match.group(1) for match in LINK.finditer(line)]
    return targets


def problems_of(path: Path) -> list[str]:
    """The links of ``path`` that do not resolve, each as ``file: target (why)``."""
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not relative
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / unquote(file_part)).resolve() if file_part else path
        name = path.relative_to(REPO)
        if not linked.exists():
            problems.append(f"{name}: {target} (no such file)")
        elif anchor and (linked.suffix != ".md" or unquote(anchor) not in anchors(linked)):
            problems.append(f"{name}: {target} (no heading #{anchor} in {linked.relative_to(REPO)})")
        elif REPO not in linked.parents and linked != REPO:
            problems.append(f"{name}: {target} (outside the repository)")
    return problems


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(REPO)) for p in DOCS])
def test_every_relative_link_resolves(path: Path) -> None:
    assert problems_of(path) == []


def test_the_guides_are_linked_from_the_readme() -> None:
    readme_links = {t.partition("#")[0] for t in links(REPO / "README.md")}
    guides = {f"docs/{p.name}" for p in DOCS[1:] if p.name != "BENCHMARKS.md"}
    assert guides - readme_links == set()


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Quick start", "quick-start"),
        ("What a run leaves", "what-a-run-leaves"),
        ("Role `tf_preflight`", "role-tf_preflight"),
        ("A dry run: `--check` and `--diff`", "a-dry-run---check-and---diff"),
        ("Stopping, following and collecting a run", "stopping-following-and-collecting-a-run"),
        ("When a run goes wrong", "when-a-run-goes-wrong"),
        ("[Logs](x.md) of a run", "logs-of-a-run"),
    ],
)
def test_slug_is_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_and_a_broken_anchor_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Real part\n\n## Real part\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(
        "See [a](docs/a.md), [b](docs/a.md#real-part), [c](docs/a.md#real-part-1), [d](#top),\n"
        "[e](docs/missing.md), [f](docs/a.md#nowhere), ![g](docs/a.png) and [h](https://example.org/x).\n"
        "```\n[i](docs/in-code.md)\n```\n`[j](docs/in-span.md)`\n# Top\n",
        encoding="utf-8",
    )
    assert problems_of(page) == [
        "README.md: docs/missing.md (no such file)",
        "README.md: docs/a.md#nowhere (no heading #nowhere in docs/a.md)",
        "README.md: docs/a.png (no such file)",
    ]
