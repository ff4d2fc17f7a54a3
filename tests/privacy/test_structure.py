"""The privacy layer stays independent of models/algorithms/training/cli; factories agree with specs."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dpemb.privacy as privacy
from dpemb.privacy import (
    GaussianNoise,
    PrivacySpec,
    TreeAggregationNoise,
    make_accumulator,
    make_noise,
    make_sampler,
)

FORBIDDEN = ("dpemb.models", "dpemb.algorithms", "dpemb.training", "dpemb.cli", "dpemb.transfer")


def test_privacy_imports_nothing_downstream():
    src = Path(privacy.__file__).parent
    for path in src.glob("*.py"):
        text = path.read_text()
        for name in FORBIDDEN:
            assert name not in text, f"{path.name} mentions {name}"


def test_accounting_does_not_import_torch():
    code = ("import sys, dpemb.privacy as p; "
            "p.epsilon_for(p.PrivacySpec(population=100, clients_per_round=5)); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_factories_follow_the_spec():
    gauss = PrivacySpec(population=100, clients_per_round=5, users_per_client=2, noise_multiplier=0.7)
    assert isinstance(make_noise(gauss, seed=1), GaussianNoise)
    acc = make_accumulator(gauss, [torch.zeros(3)])
    assert acc.sensitivity == 2.0 and acc.clip_norm == 1.0
    sampler = make_sampler(gauss, seed=0)
    assert sampler.sampling == "poisson" and sampler.sampling_rate == pytest.approx(0.1)
    tree = PrivacySpec(population=100, clients_per_round=5, users_per_client=2, mechanism="tree",
                       tree_restarts=True)
    noise = make_noise(tree, seed=1)
    assert isinstance(noise, TreeAggregationNoise) and noise.restart_every == tree.rounds_per_epoch == 10
    assert make_sampler(tree).sampling == "epoch"
    nonpriv = PrivacySpec(population=100, clients_per_round=5, noise_multiplier=0.0, nonprivate=True)
    assert not make_noise(nonpriv).private
