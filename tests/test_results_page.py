"""docs/RESULTS.md sections are replaced in place, other text is kept; every results page
says beside its headline what its epsilon covers (experiments/epsilon_scope.py)."""

import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

from epsilon_scope import LEAD, own_epsilon_note, scope_note  # noqa: E402
from results_page import HEADER, update_section  # noqa: E402

DOCS = ROOT / "docs"


def test_sections_are_added_then_replaced_in_place(tmp_path):
    update_section(tmp_path, "a", "## A\nfirst")
    update_section(tmp_path, "b", "## B\nsecond")
    update_section(tmp_path, "a", "## A\nthird")
    text = (tmp_path / "RESULTS.md").read_text()
    assert text.startswith(HEADER)
    assert "first" not in text and text.count("## A") == 1
    assert text.index("third") < text.index("second")  # A keeps its place before B
    assert not list(tmp_path.glob("*.tmp"))


def test_hand_written_text_outside_the_markers_is_kept(tmp_path):
    update_section(tmp_path, "a", "x")
    p = tmp_path / "RESULTS.md"
    p.write_text(p.read_text() + "\nA note kept by hand.\n")
    update_section(tmp_path, "a", "y")
    assert "A note kept by hand." in p.read_text()


def headline_blocks() -> dict[str, str]:
    """Each results page, and each section of docs/RESULTS.md, that quotes an ε: its text."""
    out = {p.name: p.read_text() for p in sorted(DOCS.glob("RESULTS_*.md"))}
    sections = re.findall(r"<!-- begin: (\w+) -->(.*?)<!-- end: \1 -->", (DOCS / "RESULTS.md").read_text(), re.S)
    out |= {f"RESULTS.md#{name}": text for name, text in sections if "ε" in text}
    return out


def test_every_results_page_says_what_its_epsilon_covers_beside_its_headline():
    blocks = headline_blocks()
    assert len(blocks) >= 14  # 7 pages, 7 sections with an ε
    for name, text in blocks.items():
        assert LEAD in text, f"{name}: no note on what its epsilon covers"
        # beside the headline: before the first table (a section without one: before its first finding)
        first = text.find("\n|") if "\n|" in text else text.index("\n- ")
        assert text.index(LEAD) < first, f"{name}: the note is not beside the headline (before its first table)"
        for note in re.findall(re.escape(LEAD) + r"[^\n]*", text):
            assert "Hyper-parameter selection is not accounted" in note, name
            assert "no ε covers that choice" in note and "not releases" in note, name
            assert "benchmark timing on" in note, name  # the timing rule's label
            if "no extrapolation" not in note:  # an extrapolated ε: the simulated run's own ε, a number
                assert "is an extrapolation" in note, name
                assert re.search(r"own ε, at their [\d,]+ users, is [\d.,]+", note), name


def own_range(note: str) -> tuple[str, str]:
    m = re.search(r"own ε, at their [\d,]+ users, is ([\d.,]+)(?: to ([\d.,]+))?", note)
    return m.group(1), m.group(2) or m.group(1)


def test_the_exported_pages_quote_their_exports_own_epsilons_and_selection_runs():
    for page, study in (("RESULTS_MOONSHOT.md", "moonshot"), ("RESULTS_LONG.md", "long")):
        rows = [json.loads(ln) for ln in (DOCS / "data" / f"{study}.jsonl").read_text().splitlines()]
        runs = [(r["privacy"]["epsilon_rdp"], r["settings"].get("data.eval_split") == "validation") for r in rows
                if isinstance(r["privacy"], dict) and r["privacy"].get("epsilon_rdp") is not None]
        runs = [(e, val) for e, val in runs if math.isfinite(e)]
        note = next(ln for ln in (DOCS / page).read_text().splitlines() if ln.startswith(LEAD))
        assert own_range(note) == (f"{min(runs)[0]:,.0f}", f"{max(runs)[0]:,.0f}"), page
        assert f"{sum(v for _, v in runs)} DP runs on the same training users, scored on the validation split" in note
        assert f"({len(runs)} DP runs in all" in note, page
        assert note in (DOCS / "RESULTS.md").read_text()  # the summary section says the same


def test_the_note_counts_the_runs_that_chose_the_knobs():
    recs = [{"job": {"kind": "fed", "eval_split": "validation"}, "eps_sim": 30910.2, "delta_sim": 2.2e-5},
            {"job": {"kind": "fed", "eval_split": "test"}, "eps_sim": 2850.0, "delta_sim": 2.2e-5},
            {"job": {"kind": "fed", "eval_split": "validation"}, "eps_sim": math.inf},  # no noise: not a DP run
            {"job": {"kind": "central"}, "final": 0.9}]
    note = scope_note(recs, users=4590, headline="ε 2 at 100k users", source="the export")
    assert note.startswith(LEAD + " ε 2 at 100k users is an extrapolation")
    assert "own ε, at their 4,590 users, is 2,850 to 30,910 (RDP, δ 2.2e-05; the export)" in note
    assert "1 DP run on the same training users, scored on the validation split, chose the knobs (2 DP runs in all)" in note
    none = scope_note(recs[1:2], users=4590, headline="ε 2", source="x", earlier="; the knobs came from elsewhere")
    assert "no run here chose a knob (1 DP runs in all; the knobs came from elsewhere)" in none
    own = own_epsilon_note(units="60,000 examples", tuning_runs=186, tuned_on="the same examples", data="public data")
    assert "no extrapolation" in own and "186 DP runs on the same examples" in own and "public data" in own
