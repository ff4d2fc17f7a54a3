"""``dpemb train --clip-norm`` with a NaN, zero, negative or infinite value is one usage
line naming the fix (the boundary of issue #35 item 7's single clip-norm check)."""

from __future__ import annotations

import pytest

from tests.cli.test_fail_closed_cli import refused
from tests.cli.test_train_cli_privacy import FED, captured, run_stubbed  # noqa: F401  (fixture)


@pytest.mark.parametrize("algorithm", ["dp-fedemb", "dp-ftrl-fedemb"])
def test_train_refuses_a_bad_clip_norm_and_the_fix_works(tiny_data_dir, tmp_path, capsys, captured,  # noqa: F811
                                                         algorithm):
    base = ["train", "--data", tiny_data_dir, "--out", str(tmp_path / "r"), *FED, "--algorithm", algorithm,
            "--noise-multiplier", "1"]
    for bad in ("nan", "0", "-1", "inf"):
        line = refused([*base, "--clip-norm", bad], capsys)
        assert f"clip norm must be positive and finite, got {float(bad)!r}" in line and "--clip-norm C" in line
    assert run_stubbed([*base, "--clip-norm", "0.3"], captured)["spec"].clip_norm == 0.3
