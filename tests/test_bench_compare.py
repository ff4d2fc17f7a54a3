"""The benchmarks' like-for-like check (bench/_compare.py) and bench_accounting's use of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench._compare import same_quantity
from tests.conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[1]


def test_match_passes_and_says_what_was_checked():
    line = same_quantity("epsilon", params={"delta": (1e-8, 1e-8)}, values={"epsilon": (1.0, 1.0 + 1e-12)},
                         rtol=1e-9)
    assert "delta 1e-08 on both sides" in line and "epsilon 1 / 1" in line
    same_quantity("deltas", values={"delta": (np.ones(5), np.ones(5) * (1 + 1e-7))}, rtol=1e-6)


def test_different_parameter_stops():
    with pytest.raises(SystemExit) as e:
        same_quantity("epsilon", params={"delta": (1e-8, 1e-7)}, values={"epsilon": (1.0, 1.0)})
    assert e.value.code != 0 and "delta = 1e-08" in str(e.value.code) and "delta = 1e-07" in str(e.value.code)


@pytest.mark.parametrize("ours, base", [(1.0798, 0.9153), (1.0, float("nan")), (float("inf"), 1.0)])
def test_different_or_non_finite_value_stops(ours, base):
    with pytest.raises(SystemExit) as e:
        same_quantity("epsilon", params={"delta": (1e-8, 1e-8)}, values={"epsilon": (ours, base)}, rtol=1e-9)
    assert "epsilon" in str(e.value.code) and "no ratio reported" in str(e.value.code)


def test_arrays_compare_by_norm_and_shape():
    with pytest.raises(SystemExit, match="tolerance"):
        same_quantity("deltas", values={"delta": (np.ones(5), np.ones(5) * 1.1)}, rtol=1e-3)
    with pytest.raises(SystemExit, match="shape"):
        same_quantity("deltas", values={"delta": (np.ones(5), np.ones(4))}, rtol=1.0)


def test_bench_accounting_quick_checks_equal_delta_and_values():
    out = subprocess.run([sys.executable, "bench/bench_accounting.py", "--quick"], cwd=ROOT, env=subprocess_env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "dpemb's spec delta 1e-06, baselines' delta 1e-06" in lines[0]
    for task in ("epsilon, RDP vs dp_accounting RDP", "epsilon, PLD", "ledger RDP", "ledger PLD"):
        (line,) = [ln for ln in lines if ln.startswith(task) and "same quantity" in ln]
        assert "same quantity: delta 1e-06 on both sides" in line
    assert any(ln.startswith("ratio = dpemb time") for ln in lines)


def test_bench_accounting_stops_when_the_baseline_uses_another_delta(monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_accounting

    raw = bench_accounting.raw_rdp
    monkeypatch.setattr(bench_accounting, "raw_rdp", lambda s, delta: raw(s, 10 * delta))  # the old flaw
    with pytest.raises(SystemExit) as e:
        bench_accounting.main(["--quick"])
    assert "epsilon, RDP vs dp_accounting RDP: not the same value" in str(e.value.code)
    assert "ratio" not in capsys.readouterr().out  # no table printed


def test_bench_transfer_without_real_data_says_how_to_get_it_then_runs_on_it(tmp_path, monkeypatch, capsys):
    import dpemb.data.importers.fashion_mnist as fm
    from dpemb.models.pretrained import imagenet_weights_available
    from tests.data.test_importers import make_fashion_fixture

    if not imagenet_weights_available():
        pytest.skip("the ImageNet MobileNetV2 weights are not installed (make weights)")
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_transfer

    monkeypatch.setattr(bench_transfer, "CACHE", tmp_path / "cache")  # no cached features
    monkeypatch.setattr(fm, "_dpkg_listed_dirs", lambda: [])  # and no data anywhere
    monkeypatch.setattr(fm, "KNOWN_DIRS", [tmp_path / "none"])
    monkeypatch.setenv("DPEMB_CACHE", str(tmp_path / "none"))
    monkeypatch.delenv(fm.ENV_DIR, raising=False)
    with pytest.raises(SystemExit) as e:
        bench_transfer.real_features(5, 2)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "bench_transfer cannot run" in err and "make fashion-mnist" in err
    assert not (tmp_path / "cache").exists()  # nothing synthetic made in its place

    make_fashion_fixture(tmp_path / "fm", n_train=7, n_test=3)  # the advice: a folder of IDX files
    monkeypatch.setenv(fm.ENV_DIR, str(tmp_path / "fm"))
    train, test = bench_transfer.real_features(5, 2)
    assert (train.num_examples, test.num_examples, train.dim) == (5, 2, 1280)
    assert train.meta["data"] == "fashion-mnist:train[:5]"
    assert (tmp_path / "cache" / "features_train_64px_first5.npz").is_file()  # cached for the next run
