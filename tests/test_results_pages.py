"""docs/RESULTS*.md, the studies' rendered pages and the retired studies' frozen ones alike:
every page (and every section of RESULTS.md that quotes an ε) says beside its headline
what its epsilon covers, and no page prints a column of training's private diagnostics."""

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"
LEAD = "**What this ε covers.**"
# column names under which a page would print private diagnostics ("loss" alone names the loss function)
PRIVATE_COLUMNS = {"pre-clip norm", "train loss", "training loss", "final loss", "local loss", "fraction clipped",
                   "clipped", "unclipped clients", "examples per round", "users per round"}


def test_every_results_page_says_what_its_epsilon_covers_beside_its_headline():
    blocks = {p.name: p.read_text() for p in sorted(DOCS.glob("RESULTS_*.md"))}
    sections = re.findall(r"<!-- begin: (\w+) -->(.*?)<!-- end: \1 -->", (DOCS / "RESULTS.md").read_text(), re.S)
    blocks |= {f"RESULTS.md#{name}": text for name, text in sections if "ε" in text}
    assert len(blocks) >= 14  # 7 pages, 7 sections with an ε
    for name, text in blocks.items():
        assert LEAD in text, f"{name}: no note on what its epsilon covers"
        first = text.find("\n|") if "\n|" in text else text.index("\n- ")  # no table: its first finding
        assert text.index(LEAD) < first, f"{name}: the note is not beside the headline (before its first table)"
        for note in re.findall(re.escape(LEAD) + r"[^\n]*", text):
            assert "Hyper-parameter selection is not accounted" in note and "no ε covers that choice" in note, name
            assert "not releases" in note and "benchmark timing on" in note, name
            if "no extrapolation" not in note:  # an extrapolated ε: the simulated run's own ε, a number
                assert "is an extrapolation" in note, name
                assert re.search(r"own ε, at their [\d,]+ users, is [\d.,]+", note), name


def private_columns(lines: list[str]) -> list[str]:
    """The header rows of the markdown tables in ``lines`` that name a private diagnostic."""
    return [line for line, below in zip(lines, lines[1:])
            if line.startswith("|") and below.startswith("|") and set(below) <= set("|-: ")
            and {c.strip().lower() for c in line.strip("|").split("|")} & PRIVATE_COLUMNS]


def test_no_results_page_prints_a_private_diagnostic_column():
    assert private_columns(["| run | z (sim) | final | pre-clip norm | loss | s |", "|---|---|---|---|---|---|"])
    for page in sorted(DOCS.rglob("*.md")):
        assert private_columns(page.read_text().splitlines()) == [], page.name
