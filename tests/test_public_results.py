"""experiments/public_results.py: the export committed beside a results page holds no
private training diagnostics and never loses a run a later, partial work folder lacks."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import public_results as pub  # noqa: E402


def test_the_public_record_drops_the_private_training_diagnostics():
    rec = {"job": {"key": "k"}, "final": 0.9, "seconds": 3.0, "z": 0.01, "eps_1000000": 1.0, "z_1000000": 1.8,
           "M_1000000": 1743, "final_clip_norm": 0.6, "preclip_norm": 0.74, "final_loss": 0.6, "something_new": 1}
    assert set(pub.public_record(rec)) == {"job", "final", "seconds", "z", "eps_1000000", "z_1000000", "M_1000000",
                                           "final_clip_norm"}


def test_a_merge_keeps_earlier_runs_and_invocations_and_prefers_the_work_folder():
    earlier = pub.merge({}, {"a": {"final": 0.1, "final_loss": 1.0}, "b": {"final": 0.2}},
                        {"invocations": [{"started": 1.0, "wall_s": 60.0}]}, {"info": {"users": 9}, "x": 1}, "about",
                        base={"p": {"final": 0.5, "preclip_norm": 2.0}})
    later = pub.merge(earlier, {"b": {"final": 0.3}, "c": {"final": 0.4}},
                      {"invocations": [{"started": 2.0, "wall_s": 30.0}]}, {"info": None}, "about")
    assert {k: v["final"] for k, v in later["runs"].items()} == {"a": 0.1, "b": 0.3, "c": 0.4}
    assert later["base"] == {"p": {"final": 0.5}} and "final_loss" not in later["runs"]["a"]
    assert [t["started"] for t in later["timing"]["invocations"]] == [1.0, 2.0]
    assert later["context"] == {"info": {"users": 9}, "x": 1}  # None keeps the earlier value
    # the same invocation merged twice counts once
    again = pub.merge(later, {}, {"invocations": [{"started": 2.0, "wall_s": 30.0}]}, {}, "about")
    assert [t["started"] for t in again["timing"]["invocations"]] == [1.0, 2.0]


def test_an_export_without_runs_never_replaces_one(tmp_path):
    path = tmp_path / "data" / "x.json"
    pub.write(path, pub.merge({}, {"a": {"final": 0.1}}, {}, {}, "about"))
    before = path.read_text()
    pub.write(path, pub.merge({}, {}, {}, {}, "about"))
    assert path.read_text() == before and pub.load(path)["runs"] == {"a": {"final": 0.1}}
    assert pub.load(tmp_path / "missing.json") == {}
