"""Black-box user-level audit (dpemb.training.audit_run): crafted canary users in the
dataset, the score from the released model alone.

What is tested: the canaries' data and inclusion (a left-out canary is a user without
data, the population counts every canary), the score against a direct computation, and
an end-to-end audit run whose record, accounting and privacy files are right and whose
bounds stay below the reported epsilon.

What is NOT tested, and why: that the black-box audit catches a planted bug. On the
seconds-scale model of these tests even the noise switched off leaves only a weak,
seed-dependent membership signal in the released model (a signed effect of -0.1 to 1.1
standard deviations over canary seeds, 50 canaries), far below what a one-run bound
needs; a test asserting it would pass or fail by the seed. bench/bench_audit.py
measures the black-box audit instead, and docs/AUDIT.md says what it can and cannot show.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dpemb.algorithms.config import FederatedConfig
from dpemb.privacy import PrivacySpec
from dpemb.training.audit_run import NOT_FOR_RELEASE, PRIVATE_FILE, AuditError
from dpemb.training.audit_run import (
    black_box_audit,
    make_canary_users,
    score_canaries,
    with_canary_users,
)
from dpemb.training.config import RunConfig
from tests.conftest import make_tiny_dataset
from tests.privacy.test_audit_training import MODEL

CANARIES = 50


def test_canary_users_are_keyed_identities_with_fair_coins():
    a = make_canary_users(400, (28, 28, 1), images_per_user=3, seed=1)
    b = make_canary_users(400, (28, 28, 1), images_per_user=3, seed=1)
    assert np.array_equal(a.images, b.images) and np.array_equal(a.included, b.included)
    assert a.images.shape == (400, 3, 28, 28, 1) and a.images.dtype == np.uint8
    assert 150 < a.included.sum() < 250
    # one identity per canary: its images are far closer to each other than to another canary's
    x = a.images.reshape(400, 3, -1).astype(float)
    assert np.abs(x[0, 0] - x[0, 1]).mean() < 0.5 * np.abs(x[0, 0] - x[1, 0]).mean()
    with pytest.raises(AuditError):
        make_canary_users(10, (28, 28, 1))
    with pytest.raises(AuditError):
        make_canary_users(40, (28, 28, 1), images_per_user=1)


def test_left_out_canaries_are_users_without_data():
    train = make_tiny_dataset(num_users=12).split().train
    c = make_canary_users(30, train.image_shape, images_per_user=4, seed=2)
    aug = with_canary_users(train, c)
    assert aug.num_users == train.num_users + 30  # the population counts every canary
    sizes = aug.user_sizes()[train.num_users:]
    assert np.array_equal(sizes, np.where(c.included, 4, 0))
    assert np.array_equal(aug.user_sizes()[: train.num_users], train.user_sizes())
    assert aug.num_classes == train.num_classes + 30
    for i in np.flatnonzero(c.included)[:3]:
        imgs, labels = aug.user_examples(train.num_users + int(i))
        assert np.array_equal(imgs, c.images[i]) and set(labels.tolist()) == {train.num_classes + int(i)}


class _Flatten(torch.nn.Module):
    embedding_dim = 6

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(28 * 28, 6)
        torch.nn.init.normal_(self.proj.weight, generator=torch.Generator().manual_seed(0))

    def forward(self, x):
        return self.proj(x.flatten(1))


def test_score_is_own_pairs_minus_other_canaries():
    c = make_canary_users(25, (28, 28, 1), images_per_user=3, seed=4)
    model = _Flatten()
    got = score_canaries(model, c)
    with torch.no_grad():
        e = torch.nn.functional.normalize(model(torch.as_tensor(c.images.reshape(75, 1, 28, 28) / 255.0,
                                                                dtype=torch.float32)), dim=1).double()
    e = e.reshape(25, 3, -1)
    for i in (0, 7, 24):
        own = np.mean([float(e[i, a] @ e[i, b]) for a in range(3) for b in range(3) if a != b])
        other = np.mean([float(e[i, a] @ e[j, b]) for a in range(3) for j in range(25) if j != i for b in range(3)])
        assert got[i] == pytest.approx(own - other, abs=1e-5)


def _run(out) -> tuple[dict, dict]:
    splits = make_tiny_dataset(num_users=12).split()
    train, ev = splits.train, splits.eval
    pop = train.num_users + CANARIES
    spec = PrivacySpec(population=pop, clients_per_round=pop, users_per_client=1, noise_multiplier=2.0,
                       clip_norm=0.5, rounds=2, delta=1e-5)
    cfg = FederatedConfig(algorithm="dp-fedemb", local_batch_size=2, server_momentum=0.0, server_lr=5.0)
    run = RunConfig(out=str(out), eval_every=100, progress=False, checkpoint_interval_s=0, eval_max_pairs=200)
    torch.set_num_threads(1)
    report = black_box_audit(train, ev, MODEL, cfg, spec, run, canaries=CANARIES, canary_seed=3, noise_seed=1)
    return report, json.loads((out / "private" / PRIVATE_FILE).read_text())


def test_black_box_audit_record_and_accounting(tmp_path):
    report, secret = _run(tmp_path / "run")
    a = report["privacy"]["audit"]
    assert a["kind"].startswith("black-box") and a["canaries"] == CANARIES
    assert a["population"] == {"real_users": 10, "canary_users": CANARIES, "accounted": 10 + CANARIES}
    assert report["privacy"]["spec"]["population"] == 10 + CANARIES  # the accountant counts the canaries
    assert a["epsilon_reported"] == report["privacy"]["epsilon_rdp"] and a["mu_accounted"] == pytest.approx(
        np.sqrt(2) / 2)
    assert a["epsilon_lower_bound"] <= a["epsilon_reported"] and not a["warning"]
    assert a["epsilon_lower_bound_fdp"] <= a["epsilon_reported"]
    assert a["release"] == NOT_FOR_RELEASE and "included" not in json.dumps(a)
    saved = json.loads((tmp_path / "run" / "report.json").read_text())
    card = json.loads((tmp_path / "run" / "model_card.json").read_text())
    assert saved["privacy"]["audit"] == a and card["privacy"]["audit"] == a
    assert len(secret["included"]) == len(secret["scores"]) == CANARIES and secret["kind"] == "black-box"
    assert (tmp_path / "run" / "private" / PRIVATE_FILE).stat().st_mode & 0o077 == 0
    # the scores in the private file are the released model's (nothing else is consulted)
    from dpemb.training.artifact import load_artifact

    model, _ = load_artifact(tmp_path / "run")
    again = score_canaries(model, make_canary_users(CANARIES, (28, 28, 1), seed=3))
    assert again == pytest.approx(np.array(secret["scores"]), abs=1e-6)


def test_black_box_audit_refuses_a_wrong_population(tmp_path):
    splits = make_tiny_dataset(num_users=12).split()
    spec = PrivacySpec(population=70, clients_per_round=20, noise_multiplier=1.0)  # 10 real + 50 canaries = 60
    with pytest.raises(AuditError, match="population"):
        black_box_audit(splits.train, splits.eval, MODEL, FederatedConfig(algorithm="dp-fedemb"), spec,
                        RunConfig(out=str(tmp_path / "r")), canaries=CANARIES)
