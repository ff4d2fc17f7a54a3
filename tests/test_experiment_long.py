"""experiments/fedemb_long.py: its runs are fedemb_scale's (shared keys), its goal verdicts
follow the numbers, and its public export holds no private diagnostics and rewrites the
same page in a fresh clone."""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import fedemb_long_plan as fl  # noqa: E402
import fedemb_long_report as rep  # noqa: E402
import fedemb_scale as sc  # noqa: E402

ARGS = argparse.Namespace(quick=False, seeds=None)


def full() -> dict:
    return fl.settings(ARGS)


def test_the_runs_are_fedemb_scales_runs_at_twice_part_6s_budgets():
    st = full()
    # the reference's seed 0 is the convergence curve's 64000-step run of fedemb_scale
    assert fl.ref_job(st, 0)["key"] in {j["key"] for j in sc.central_curve_jobs(st)}
    assert fl.ref_job(st, 0)["steps"] == 2 * sc.CONVERGED[1] and fl.ref_job(st, 2)["loss"] == "arcface"
    run = fl.fed_job(st, 1, (10_000_000, 0.5))
    assert run["rounds"] == 2 * sc.LONG_ROUNDS
    assert run["key"] == sc.long_run(st, 1, (10_000_000, 0.5), rounds=1200)["key"]
    assert run["population"] == 10_000_000 and run["fed"]["loss"] == "arcface"
    keys = [j["key"] for j in fl.jobs(st)]
    assert len(keys) == len(set(keys)) == 3 * (1 + len(fl.CELLS)) + 2 + 3 + 1 + 1 + 2 + 3
    # seed by seed the reference and the tightest cell, then the other cell's seeds
    tight = (10_000_000, 0.5)
    assert fl.CELLS[0] == tight and sc.GOAL2_TARGET[tight[0]] == max(sc.GOAL2_TARGET.values())
    assert keys[:6] == [k for s in range(3) for k in (fl.ref_job(st, s)["key"], fl.fed_job(st, s, tight)["key"])]
    assert keys[6:9] == [fl.fed_job(st, s, fl.CELLS[1])["key"] for s in range(3)]
    assert keys[14] == fl.fed_job(st, 0, None)["key"] and "/np/" in keys[14]
    # then the reference's convergence check: seed 0 at twice its steps, its own key
    check = fl.ref_check_job(st)
    assert keys[15] == check["key"] and check["steps"] == 2 * fl.ref_job(st, 0)["steps"] == 128000
    assert check["seed"] == 0 and check["loss"] == "arcface" and check["init"] == fl.ref_job(st, 0)["init"]
    assert {n for n, _ in fl.CELLS} == set(sc.GOAL2_TARGET)


def test_the_k_lever_is_chosen_on_validation_and_its_k16_test_run_is_the_goal_cells_run():
    st = full()
    tight = fl.CELLS[0]
    assert [fl.k_job(st, s, fl.K_BASE)["key"] for s in range(3)] == [fl.fed_job(st, s, tight)["key"] for s in range(3)]
    big = fl.k_job(st, 1, fl.K_LEVER)
    assert big["fed"]["K"] == 32 and big["rounds"] == 1200 and big["population"] == tight[0] and big["eps"] == 0.5
    assert big["eval_split"] == "test" and "/K32/" in big["key"]
    val = [fl.k_job(st, 0, K, "validation") for K in (fl.K_BASE, fl.K_LEVER)]
    assert all(j["eval_split"] == "validation" and j["rounds"] == fl.VAL_ROUNDS and j["key"].endswith("/validation")
               for j in val)
    keys = [j["key"] for j in fl.jobs(st)]
    # the validation runs come before the lever's test runs, the no-noise run stays last
    assert keys[9:11] == [j["key"] for j in val]
    assert keys[11:14] == [fl.k_job(st, s, fl.K_LEVER)["key"] for s in range(3)]
    # the lever at 1M users: validation runs, then K = 32's test seeds only once validation chose it
    one_m = fl.CELLS[1]
    val1 = [fl.k_job(st, 0, K, "validation", one_m) for K in (fl.K_BASE, fl.K_LEVER)]
    assert all(j["population"] == 1_000_000 and j["eps"] == 1.0 and j["rounds"] == fl.VAL_ROUNDS for j in val1)
    assert keys[16:18] == [j["key"] for j in val1]
    test1 = [fl.k_job(st, s, fl.K_LEVER, "test", one_m)["key"] for s in range(3)]
    assert keys[18:] == test1  # without finished runs to look at: the whole plan
    assert fl.k_job(st, 2, fl.K_BASE, "test", one_m)["key"] == fl.fed_job(st, 2, one_m)["key"]

    def val_only(v16, v32):
        return sc.Lookup({j["key"]: {"job": j, "final": v, "z": 0.02} for j, v in zip(val1, (v16, v32))}, {})

    assert [j["key"] for j in fl.jobs(st, sc.Lookup({}, {}))] == keys[:18]  # not chosen yet
    assert [j["key"] for j in fl.jobs(st, val_only(0.90, 0.89))] == keys[:18]  # K = 16 chosen
    assert [j["key"] for j in fl.jobs(st, val_only(0.89, 0.90))] == keys  # K = 32 chosen
    assert fl.k_choice(val_only(0.89, 0.90), st, one_m) == fl.K_LEVER and fl.k_choice(val_only(0.89, 0.90), st) is None
    ref = (0.95, 0.01, 3)
    _, found = rep.lever_section(st, val_only(0.89, 0.90), ref, rep.lever_rows(st, val_only(0.89, 0.90), ref, one_m),
                                 one_m)
    assert found == ["- **K at 1M users, ε 1**: the validation split chose K = 32 (0.900, K = 16 0.890); "
                     "its test runs have not finished."]

    def records(v16, v32, t16, t32):
        out = {}
        for K, v, t in ((fl.K_BASE, v16, t16), (fl.K_LEVER, v32, t32)):
            j = fl.k_job(st, 0, K, "validation")
            out[j["key"]] = {"job": j, "final": v, "z": 0.01}
            for s in range(3):
                j = fl.k_job(st, s, K)
                out[j["key"]] = {"job": j, "final": t, "z": 0.01}
        return sc.Lookup(out, {})

    # validation decides, whatever the test runs say (here the test runs disagree with it)
    assert fl.k_choice(records(0.80, 0.82, 0.95, 0.90), st) == fl.K_LEVER
    assert fl.k_choice(records(0.82, 0.80, 0.90, 0.95), st) == fl.K_BASE
    assert fl.k_choice(records(0.81, 0.81, 0.90, 0.95), st) == fl.K_BASE  # a tie keeps K_BASE
    assert fl.k_choice(sc.Lookup({}, {}), st) is None
    lk, ref = records(0.80, 0.82, 0.95, 0.90), (0.95, 0.01, 3)
    lines, found = rep.lever_section(st, lk, ref, rep.lever_rows(st, lk, ref))
    assert "| 32 (chosen) | 0.820 | 0.01000 | 0.900 ± 0.000 | 0.947 | no |" in lines
    assert "| 16 | 0.800 | 0.01000 | 0.950 ± 0.000 | 1.000 | **yes** |" in lines
    assert len(found) == 1 and "K = 32" in found[0] and "NOT reached" in found[0]


def test_a_run_finished_in_an_earlier_checkout_is_not_run_again():
    queue = [{"key": k} for k in ("a", "b", "c", "d")]
    assert sc.pending(queue, {"a": {}}, {}, {"c": {}}) == [{"key": "b"}, {"key": "d"}]
    assert sc.pending(queue) == queue


def fake_results(st: dict, ref: tuple, cells: dict) -> dict:
    out = {fl.ref_job(st, s)["key"]: {"job": fl.ref_job(st, s), "final": v, "seconds": 1.0, "perf": {},
                                  "started_at": 0.0, "finished_at": 1.0}
           for s, v in enumerate(ref)}
    for c, vals in cells.items():
        for s, v in enumerate(vals):
            j = fl.fed_job(st, s, c)
            n = c[0]
            out[j["key"]] = {"job": j, "final": v, "seconds": 2.0, "perf": {"threads": 1}, "z": 0.001,
                             "started_at": 10.0, "finished_at": 12.0,
                             "noise_on_average": 1e-4, f"eps_{n}": c[1], f"z_{n}": 2.0, f"M_{n}": 1743,
                             "preclip_norm": 0.7, "final_loss": 0.5}
    return out


def test_a_goal_is_reached_exactly_when_the_mean_ratio_meets_it():
    st = full()
    ref = (0.95, 0.96, 0.94)  # mean 0.95
    res = fake_results(st, ref, {(10_000_000, 0.5): (0.9215, 0.9215, 0.9215),  # 0.97 x 0.95 = 0.9215
                                 (1_000_000, 1.0): (0.90, 0.90, 0.90)})  # 0.947x < 0.95
    rows = {r["pop"]: r for r in rep.goal_rows(st, sc.Lookup(res, {}), (0.95, 0.01, 3))}
    assert abs(rows[10_000_000]["ratio"] - 0.97) < 1e-9 and rows[10_000_000]["reached"]
    assert abs(rows[1_000_000]["ratio"] - 0.9 / 0.95) < 1e-12 and rows[1_000_000]["reached"] is False
    # a cell without runs is "not run", never "no"
    del res[fl.fed_job(st, 0, (1_000_000, 1.0))["key"]], res[fl.fed_job(st, 1, (1_000_000, 1.0))["key"]]
    del res[fl.fed_job(st, 2, (1_000_000, 1.0))["key"]]
    assert {r["pop"]: r for r in rep.goal_rows(st, sc.Lookup(res, {}), (0.95, 0.01, 3))}[1_000_000]["reached"] is None


def test_the_export_rewrites_the_same_page_without_the_work_folder(tmp_path):
    st = full()
    res = fake_results(st, (0.95, 0.96, 0.94), {(10_000_000, 0.5): (0.93, 0.92, 0.925),
                                                 (1_000_000, 1.0): (0.91, 0.92, 0.915)})
    doc, export = tmp_path / "docs" / "RESULTS_LONG.md", tmp_path / "docs" / "data" / "long_results.json"
    timing = {"invocations": [{"wall_s": 600.0, "runs_planned": 3}]}
    info = {"train": {"users": 4590}}
    rep.write_outputs(st, res, timing, info, doc, export, ARGS)
    first = doc.read_text()
    assert "| 10M | 0.5 | 0.925 ± 0.005 | 0.974 | 0.97x | **yes** |" in first
    assert "| 1M | 1 | 0.915 ± 0.005 | 0.963 | 0.95x | **yes** |" in first
    assert "4,590 private training users" in first and (doc.parent / "img" / "long_goal2.png").stat().st_size > 0
    text = export.read_text()
    assert "preclip_norm" not in text and "final_loss" not in text
    assert len(json.loads(text)["runs"]) == 9
    doc.unlink()
    rep.write_outputs(st, {}, {"invocations": []}, {}, doc, export, ARGS)  # a fresh clone: no work folder
    assert doc.read_text() == first
    # a later session's work folder holds only its new run: the export keeps the earlier ones
    nn = fl.fed_job(st, 0, None)
    later = {"invocations": [{"wall_s": 60.0, "runs_planned": 1, "started": 5.0}]}
    rep.write_outputs(st, {nn["key"]: {"job": nn, "final": 0.93, "seconds": 9.0, "final_loss": 0.1,
                                            "started_at": 100.0, "finished_at": 109.0}}, later, {},
                      doc, export, ARGS)
    data = json.loads(export.read_text())
    assert len(data["runs"]) == 10 and data["context"]["train_users"] == 4590
    assert [t["wall_s"] for t in data["timing"]["invocations"]] == [600.0, 60.0]
    page = doc.read_text()
    assert "No noise (seed 0, 1200 rounds): 0.930" in page and "10 runs, 0 process-minutes, 0 min of wall time" in page


def test_wall_time_counts_overlapping_runs_once_and_gaps_between_sessions_not_at_all():
    assert rep.busy_seconds([(0, 10), (5, 20), (100, 130), (110, 120)]) == 20 + 30
    assert rep.busy_seconds([(3, 4)]) == 1 and rep.busy_seconds([]) == 0


def test_the_goals_are_judged_again_against_the_reference_plus_its_seed_0_gain():
    st = full()
    res = fake_results(st, (0.945, 0.965, 0.945), {(10_000_000, 0.5): (0.92, 0.92, 0.92),
                                                    (1_000_000, 1.0): (0.955, 0.955, 0.955)})
    lk = sc.Lookup(res, {})
    ref_recs = lk.seeds(lambda s: fl.ref_job(st, s), 3)
    ref = sc.stats(ref_recs)
    rows = rep.goal_rows(st, lk, ref)
    lines, found = rep.reference_section(st, lk, ref_recs, ref, rows)
    assert "Not run yet." in lines and found == []
    check = fl.ref_check_job(st)
    res[check["key"]] = {"job": check, "final": 0.955}  # seed 0 gains +0.010: estimate 0.9517 + 0.010
    lines, found = rep.reference_section(st, lk, ref_recs, ref, rows)
    est = ref[0] + 0.010
    assert "| 128000 | 0.955 (+0.0100) | estimated 0.962 (mean + seed 0's gain) |" in lines
    # 10M: 0.967x of the reference, 0.957x of the estimate (goal 0.97x); 1M: 1.003x, 0.993x (goal 0.95x)
    assert f"| 10M | 0.5 | 16 | 0.920 ± 0.000 | {0.92 / ref[0]:.3f} | {0.92 / est:.3f} | 0.97x | no |" in lines
    assert f"| 1M | 1 | 16 | 0.955 ± 0.000 | {0.955 / ref[0]:.3f} | {0.955 / est:.3f} | 0.95x | **yes** |" in lines
    assert "still rising" in found[0] and len(found) == 3
    assert "NOT reached" in found[1] and f"needs {0.97 * est:.3f}" in found[1] and "reached" in found[2]
