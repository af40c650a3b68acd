"""Every `RULES.md N` that code, config and docs cite is a section of the in-repository docs/RULES.md."""

from __future__ import annotations

import re

from support import ROOT

RULES = ROOT / "docs" / "RULES.md"
CITING = ["src", "conf", "docs", "scripts", "tests", "README.md", "dvc.yaml"]
SUFFIXES = {".py", ".yaml", ".yml", ".md", ".sh", ".txt", ".j2", ".toml"}


def cited_sections() -> dict[str, list[str]]:
    """{section number: files citing it}."""
    found: dict[str, list[str]] = {}
    for entry in CITING:
        path = ROOT / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES]
        for file in files:
            for number in re.findall(r"RULES\.md[ §]+(\d+)", file.read_text(errors="replace")):
                found.setdefault(number, []).append(str(file.relative_to(ROOT)))
    return found


def test_every_cited_section_is_in_docs_rules():
    sections = set(re.findall(r"^## (\d+)\. ", RULES.read_text(), re.MULTILINE))
    cited = cited_sections()
    assert len(cited) >= 5, "the scan found too few citations to be looking at the code"
    missing = {n: files[:3] for n, files in cited.items() if n not in sections}
    assert not missing, f"citations of sections docs/RULES.md does not have: {missing}"
