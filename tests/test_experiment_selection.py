"""experiments/fedemb_vs_fedavg.py: K is selected on the VALIDATION split only, the test
runs exist only for the selected K, and test scores never change the selection."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import fedemb_vs_fedavg as vs  # noqa: E402


def settings():
    args = argparse.Namespace(quick=False, part=["all"])
    return vs.settings(args)


def record(score: float) -> dict:
    return {"final": score, "job": {}}


def test_k_is_chosen_on_validation_and_test_runs_follow_it():
    st, base = settings(), {}
    cell, regime, algo = vs.CELLS[0], "face", "dp-fedemb"
    val = {K: vs.job(st, base, regime, algo, K, cell, 0, "validation")["key"] for K in st["ks"]}
    results = {val[4]: record(0.60), val[16]: record(0.70)}  # K 32 not run yet
    lk = vs.sc.Lookup(results, base)
    assert vs.chosen_k(st, lk, base, regime, algo, cell) is None  # no choice before every K ran
    assert not any(j["eval_split"] == "test" and j["regime"] == regime and j["fed"]["algorithm"] == algo
                   and j.get("population") == cell[0] for j in vs.plan(st, lk, base))

    results[val[32]] = record(0.65)
    # test-split runs of another K, however good, do not move the choice
    for K in (4, 32):
        for s in range(st["seeds"]):
            results[vs.job(st, base, regime, algo, K, cell, s, "test")["key"]] = record(0.99)
    assert vs.chosen_k(st, lk, base, regime, algo, cell) == 16
    tests = [j for j in vs.plan(st, lk, base) if j["eval_split"] == "test" and j["regime"] == regime
             and j["fed"]["algorithm"] == algo and j.get("population") == cell[0]]
    assert {j["fed"]["K"] for j in tests} == {16} and len(tests) == st["seeds"]
    assert all(j["key"].endswith("@test") for j in tests)
    assert len({j["noise_seed"] for j in tests}) == st["seeds"]  # a fresh seed per test run


def test_selection_and_test_keys_never_collide():
    st, base = settings(), {}
    keys = [vs.job(st, base, r, a, K, c, s, split)["key"] for r in vs.REGIMES for a in vs.ALGOS
            for K in st["ks"] for c in st["cells"] for s in range(st["seeds"]) for split in ("validation", "test")]
    keys += [vs.published_job(st, c, s)["key"] for c in st["cells"] for s in range(st["seeds"])]
    assert len(keys) == len(set(keys))


def test_published_cost_counts_the_images_the_client_trains_on():
    """The page's cost of the authors' configuration is what ``client_batches`` yields:
    their Nmax caps the whole stream of local epochs, not each epoch."""
    import numpy as np

    from dpemb.algorithms.client import client_batches
    from dpemb.algorithms.config import FederatedConfig

    st = settings()
    per_user, users = 80, 100
    info = {"train": {"examples": per_user * users, "users": users}}
    text = vs.published_cost(st, info)
    fed = {k: v for k, v in vs.published_job(st, vs.CELLS[0], 0)["fed"].items() if k not in ("M", "K")}
    stream = client_batches(np.arange(vs.PUBLISHED["K"] * per_user), FederatedConfig(**fed),
                            np.random.default_rng(0))
    per_client = sum(len(b) for b in stream)
    assert per_client == 2048  # 8 passes over 640 examples, cut at Nmax
    images = vs.PUBLISHED["rounds"] * vs.PUBLISHED["M"] * per_client
    assert f"{images / 1e6:.1f}M local images" in text


def test_published_verdict_compares_with_the_better_tuned_algorithm():
    cell = vs.CELLS[1]
    res = {"dp-fedemb": ((0.24, 0.01, 3), 4), "dp-fedavg": ((0.29, 0.01, 3), 4)}
    assert "is ahead of" in vs.published_verdict(cell, (0.40, 0.01, 3), res)
    assert "DP-FedAvg K 4 0.290" in vs.published_verdict(cell, (0.40, 0.01, 3), res)
    assert "is behind" in vs.published_verdict(cell, (0.20, 0.01, 3), res)
    assert "is level with" in vs.published_verdict(cell, (0.295, 0.01, 3), res)
    assert vs.published_verdict(cell, (float("nan"), float("nan"), 0), res) == ""  # not run yet
