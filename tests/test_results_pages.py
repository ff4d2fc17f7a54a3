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
    assert len(blocks) >= 10  # 7 pages, 3 sections with an ε (face, hand, transfer)
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


def test_the_headline_table_is_the_exports_mean_and_the_recipes_stated_result():
    import json
    import statistics

    from dpemb.training.recipes import load_recipe

    def runs(export: str, prefix: str) -> list[float]:
        rows = [json.loads(x) for x in (DOCS / "data" / export).read_text().splitlines()]
        return [r["metrics"]["recall_at_far_0.001"] for r in rows if r["name"].rsplit("/", 1)[0] == prefix]

    ref = runs("long.jsonl", "centralized/64000")
    page = (DOCS / "RESULTS.md").read_text()
    for recipe, export, prefix in [("face-reference", "long.jsonl", "centralized/64000"),
                                   ("face-10m-eps0.5", "long.jsonl", "dp-fedemb/0.5@10,000,000/K32/r1200/test"),
                                   ("face-1m-eps1", "long.jsonl", "dp-fedemb/1@1,000,000/K32/r1200/test"),
                                   ("face-100k-eps2", "moonshot.jsonl",
                                    "arcface-clr0.1+ep2+ema0.99+K8M16+neg+r2x/e2@100k-pld-d1e-06/test")]:
        xs = runs(export, prefix)
        stated = f"{statistics.mean(xs):.3f} ± {statistics.stdev(xs):.3f}"
        row = next(ln for ln in page.splitlines() if ln.startswith(f"| `{recipe}` |"))
        assert len(xs) == 3 and stated in row and load_recipe(recipe)[1].reproduces[0].value.startswith(stated)
        assert f"| {statistics.mean(xs) / statistics.mean(ref):.3f} |" in row.replace("| 1 |", "| 1.000 |"), recipe
