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
    assert [j["steps"] for j in jobs] == list(sc.CENTRAL_BUDGETS) * 2
    ref = [j for j in jobs if j["steps"] == 1000]
    assert [j["key"] for j in ref] == [sc.central_job(st, 0)["key"], sc.central_job(st, 0, "arcface")["key"]]
    assert len({j["key"] for j in jobs}) == len(jobs)
    assert {j.get("loss", "softmax") for j in jobs if j["steps"] == 4000} == {"softmax", "arcface"}
