"""experiments/fedemb_hour.py's plan: every DP run is the ArcFace + local-head
configuration, the premise keeps the noise on the average fixed, nothing runs twice."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import fedemb_hour as fh  # noqa: E402


def test_the_plan_is_the_pages_runs_once_each():
    st = fh.settings(quick=False)
    jobs = fh.plan(st, z0=0.03)
    keys = [j["key"] for j in jobs]
    assert len(keys) == len(set(keys))
    fed = [j for j in jobs if j["kind"] == "fed"]
    central = [j for j in jobs if j["kind"] == "central"]
    assert {j.get("loss", "softmax") for j in central} == {"softmax", "arcface"} and len(central) == 6
    assert all(j["fed"]["loss"] == "arcface" and j["fed"]["local_head"] == "local" for j in fed)
    # 3 seeds x (10 (N', eps) cells + no noise); 2 seeds x (k = 2, 4 with noise, k = 4 without)
    assert len(fed) == 3 * 11 + 2 * 3
    premise = [j for j in fed if "z" in j]
    assert {j["fed"]["M"] for j in premise} == {16, 32}
    assert {round(j["z"] / j["fed"]["M"], 12) for j in premise} == {round(0.03 / 8, 12)}
    # calibrated cells: each (N', eps) of the curve and the population figure, 3 seeds
    cells = {(j["population"], j["eps"]) for j in fed if j.get("eps") is not None}
    assert cells == set(fh.cells(st)) and len(cells) == 10
    assert {(100_000, 0.5), (10_000_000, 1.0), (10_000_000, 0.5), (1_000_000, 0.5)} <= cells
    # longest first: the k = 4 runs lead, the centralized runs close
    assert jobs[0]["fed"]["M"] == 32 and jobs[-1]["kind"] == "central"
