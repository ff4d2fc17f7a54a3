"""experiments/fedemb_glyphs.py's runner: the page's wall time counts only invocations
that ran something, and the performance flags become the runner's settings."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import fedemb_glyphs as fg  # noqa: E402
import fedemb_scale as sc  # noqa: E402


def test_wall_time_adds_up_over_invocations():
    first = fg.add_invocation({}, 600.0, [1.5])
    assert first["wall_minutes"] == 10.0 and first["invocations"] == 1
    assert fg.invocations_txt(first) == ""
    second = fg.add_invocation(first, 300.0, [2.0])
    assert second["wall_minutes"] == 15.0 and second["invocations"] == 2
    assert second["load_samples"] == [1.5, 2.0]
    assert fg.invocations_txt(second) == " in 2 invocations"
    # a timing file written before invocations were counted was one invocation
    assert fg.add_invocation({"wall_minutes": 36.0}, 60.0, [])["invocations"] == 2


def test_performance_flags_reach_the_runner():
    ap = argparse.ArgumentParser()
    sc.add_run_flags(ap)
    args = ap.parse_args(["--device", "cuda", "--client-batch", "32", "--threads", "1",
                          "--checkpoint-every", "2", "--resume-runs"])
    assert sc.perf_of(args) == {"device": "cuda", "client_batch": 32, "checkpoint_every": 2, "resume": True,
                                "threads": 1}
    plain = sc.perf_of(ap.parse_args([]))
    assert plain == {"device": "auto", "client_batch": 1, "checkpoint_every": 0, "resume": False, "threads": 0}


def test_a_resumed_run_costs_the_rounds_it_kept_from_earlier_invocations():
    # rounds 1-4 ran before; the resume went back to the checkpoint at round 3, so round 4
    # was dropped and trained again (with another time)
    before = [(1, 10.0), (2, 11.0), (3, 12.0), (4, 13.0)]
    after = [(1, 10.0), (2, 11.0), (3, 12.0), (4, 9.0), (5, 9.5)]
    assert fg.earlier_invocations_seconds(before, after) == 33.0
    assert fg.earlier_invocations_seconds([], after) == 0.0  # a fresh run


def test_round_times_read_the_private_diagnostics(tmp_path):
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "diagnostics.jsonl").write_text(
        '{"round": 1, "seconds": 2.5}\n{"round": 2, "seconds": 3.0}\n'
        '{"summary": true, "round": 2, "seconds": 99}\n')
    assert fg._round_times(tmp_path) == [(1, 2.5), (2, 3.0)]
    assert fg._round_times(tmp_path / "missing") == []


def test_part_busy_time_counts_only_runs_of_that_invocation():
    runs = {"a": {"started_at": 100.0, "finished_at": 200.0},   # first invocation
            "b": {"started_at": 150.0, "finished_at": 250.0},   # overlaps a
            "c": {"started_at": 990.0, "finished_at": 1100.0},  # second one; began before it (interrupted)
            "d": {"started_at": 1200.0, "finished_at": 1300.0}}
    jobs = [{"key": k} for k in (*runs, "never-ran")]
    assert sc.part_wall(runs, jobs, 90.0, 300.0) == 150.0
    assert sc.part_wall(runs, jobs, 1000.0, 1400.0) == 200.0
    assert sc.part_wall(runs, jobs, 300.0, 900.0) == 0.0  # an invocation that ran none of them


def test_levers_are_chosen_on_validation_runs_that_never_share_a_key_with_test_runs():
    st = {"K": 16, "rounds": 150, "levers": sc.LEVERS}
    val, test = sc.lever_jobs(st, 0, "validation"), sc.lever_jobs(st, 0)
    assert {j["eval_split"] for j in val} == {"validation"} and {j["eval_split"] for j in test} == {"test"}
    assert all(j["key"].endswith("/validation") for j in val)
    assert not {j["key"] for j in val} & {j["key"] for j in test}
    # test keys keep the format the cached results were stored under
    assert test[0]["key"] == "scale/dp-fedemb/K16/M8/r150/e2@100k/s0"
    assert [j["fed"] for j in val] == [j["fed"] for j in test]  # the same training, scored elsewhere


def test_the_centralized_convergence_budgets_reuse_the_reference_and_name_the_others():
    st = {"quick": False, "reg": {"central_steps": 1000}}
    jobs = sc.central_curve_jobs(st)
    assert [j["steps"] for j in jobs] == [b for loss in ("softmax", "arcface") for b in sc.CENTRAL_BUDGETS[loss]]
    ref = [j for j in jobs if j["steps"] == 1000]
    assert [j["key"] for j in ref] == [sc.central_job(st, 0)["key"], sc.central_job(st, 0, "arcface")["key"]]
    assert len({j["key"] for j in jobs}) == len(jobs)
    assert {j.get("loss", "softmax") for j in jobs if j["steps"] == 4000} == {"softmax", "arcface"}


def test_part_6_runs_the_goal_cells_at_more_rounds_against_a_converged_reference_in_the_curve():
    st = {"quick": False, "reg": {"central_steps": 1000}, "K": 16, "rounds": 150, "headline_seeds": 3}
    jobs = sc.long_jobs(st)
    assert len({j["key"] for j in jobs}) == len(jobs)
    central = [j for j in jobs if j["kind"] == "central"]
    assert [(j["loss"], j["steps"], j["seed"]) for j in central] == [(*sc.CONVERGED, s) for s in range(3)]
    # the reference's seed 0 is a point of the convergence curve (run once, shown there)
    assert central[0]["key"] in {j["key"] for j in sc.central_curve_jobs(st)}
    fed = [j for j in jobs if j["kind"] == "fed"]
    # every noisy run is calibrated at (N', epsilon) for the rounds it runs, with the ArcFace lever
    noisy = [j for j in fed if j["eps"] is not None]
    assert all(j["rounds"] == sc.LONG_ROUNDS and j["fed"]["loss"] == "arcface" for j in noisy)
    assert all(f"/r{sc.LONG_ROUNDS}/" in j["key"] for j in noisy)
    assert {(j["population"], j["eps"]) for j in noisy} == set(sc.LONG_CELLS)
    assert sum(j["eval_split"] == "validation" for j in fed) == 1
    for s in range(3):  # every seed has every goal cell and a no-noise run at LONG_ROUNDS
        mine = [j for j in fed if j["seed"] == s and j["rounds"] == sc.LONG_ROUNDS and j["eval_split"] == "test"]
        assert len(mine) == len(sc.LONG_CELLS) + 1
    # the no-noise budget curve (seed 0) ends at part 6's rounds; its first point keys like part 4's runs
    curve = [j for j in fed if j["eps"] is None and j["seed"] == 0]
    assert sorted(j["rounds"] for j in curve) == [*sc.LONG_CURVE, sc.LONG_ROUNDS]
    assert sc.long_run(st, 0, None, rounds=150)["key"] == "scale/dp-fedemb/K16/M8/r150/np/arcface/s0"
    assert sc.long_run(st, 1, (100_000, 2.0), rounds=150)["key"] == \
        sc.fed_run(st, "dp-fedemb", 1, eps=2.0, pop=100_000, lever=sc.MOONSHOT_LEVER)["key"]


def test_the_reference_of_parts_4_to_6_is_the_converged_run_once_it_has_a_seed():
    st = {"quick": False, "reg": {"central_steps": 1000}, "K": 16, "rounds": 150, "headline_seeds": 3}
    short = {sc.central_job(st, s)["key"]: {"final": 0.84} for s in range(3)}
    short |= {sc.central_job(st, s, "arcface")["key"]: {"final": 0.78} for s in range(3)}
    r = sc.central_reference(st, sc.Lookup(short, {}))
    assert r["ref"] == 0.84 and "NOT converged" in r["label"]
    conv = {j["key"]: {"final": 0.90 + 0.01 * j["seed"]} for j in sc.converged_jobs(st)}
    r = sc.central_reference(st, sc.Lookup(short | conv, {}))
    assert abs(r["ref"] - 0.91) < 1e-12 and "NOT" not in r["label"] and f"{sc.CONVERGED[1]} steps" in r["label"]


def test_equal_examples_counts_every_user_image_of_every_client_once_per_round():
    st = {"K": 16, "reg": {"glyph": {"images_per_identity": 8, "identities_per_user": 1}}}
    assert sc.equal_examples_steps(st, 600) == 600 * sc.M0 * 16 * 8 / fg.CENTRAL_BATCH == 4800
    st["reg"]["glyph"]["identities_per_user"] = 2
    assert sc.equal_examples_steps(st, 600) == 9600


def test_a_reference_still_rising_at_seed_0_is_estimated_from_seed_0s_gain():
    st = {"quick": False, "reg": {"central_steps": 1000}, "K": 16, "rounds": 150, "headline_seeds": 3}
    conv = {j["key"]: {"final": (0.93, 0.96, 0.94)[j["seed"]]} for j in sc.converged_jobs(st)}
    longer = sc.central_job(st, 0, "arcface", max(sc.CENTRAL_BUDGETS["arcface"]))
    assert longer["steps"] > sc.CONVERGED[1]
    def rising(runs: dict) -> dict | None:
        lk = sc.Lookup(runs, {})
        return sc.rising_reference(st, lk, sc.central_reference(st, lk))

    assert rising(conv | {longer["key"]: {"final": 0.934}}) is None  # flat
    up = rising(conv | {longer["key"]: {"final": 0.945}})
    # the gain is seed 0's own (0.945 - 0.93), added to the 3-seed mean, not 0.945 itself
    assert abs(up["gain"] - 0.015) < 1e-12 and abs(up["estimate"] - ((0.93 + 0.96 + 0.94) / 3 + 0.015)) < 1e-12
    # a shorter curve run never counts as "rising"
    shorter = sc.central_job(st, 0, "arcface", 16000)
    assert rising(conv | {shorter["key"]: {"final": 0.99}}) is None
