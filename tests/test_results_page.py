"""docs/RESULTS.md sections are replaced in place, other text is kept."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

from results_page import HEADER, update_section  # noqa: E402


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
