from __future__ import annotations


import numpy as np
import pytest
from PIL import Image

from dpemb.metrics import plot_roc, verification_metrics


def _result(seed, spread):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 20, 300)
    x = rng.normal(size=(20, 8))[y] + spread * rng.normal(size=(300, 8))
    return verification_metrics(x, y, fars=(1e-3, 1e-2))


def test_writes_a_valid_png_atomically(tmp_path):
    results = {"trained": _result(0, 0.8), "random init": _result(1, 5.0)}
    out = tmp_path / "plots" / "roc.png"
    got = plot_roc(results, out, title="test")
    assert got == out
    with Image.open(out) as im:
        im.verify()
    with Image.open(out) as im:
        assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200
    assert [p.name for p in out.parent.iterdir()] == ["roc.png"]  # no temp file left
    first = out.read_bytes()
    plot_roc({"only": results["trained"]}, out)  # overwrite in place
    assert out.read_bytes() != first


def test_rejects_no_results(tmp_path):
    with pytest.raises(ValueError):
        plot_roc({}, tmp_path / "roc.png")
