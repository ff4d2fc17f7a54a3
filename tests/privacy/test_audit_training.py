"""White-box user-level canaries in federated training (issue #14): planted bugs are
caught by the audit's lower bound, the correct mechanism passes.

Each planted bug goes in through ``planted`` (a test-only monkeypatch of the real code
path; no user flag can turn one on):

(a) noise off while the accountant believes z        -> GaussianNoise.add returns the sum
(b) noise scaled for after the division by M         -> std z x S / M on the SUM
(c) no clipping                                      -> clipping._clip returns its input
(d) sensitivity C where it is 2C (K > 1)             -> the round's ClipAndSum says S = C

Setting (``SETTING``): a tiny LeNet (about 16k aggregated parameters), 10 real users,
1000 canaries, Poisson sampling at rate q = 1 (every user, real or canary, in every
round: the most canary signal per round the accountant allows), one round, z = 2,
delta = 1e-6: the correct mechanism's reported epsilon is 2.4. The bugs that remove
the noise or the clip are caught by both lower bounds; (d), a factor 2 in the noise,
is beyond the (eps, delta) bound at any size that runs in seconds, and is caught by
the f-DP analysis with 10 000 (Dirac) canaries (``test_bug_d_sensitivity_c_where_2c``,
docs/AUDIT.md).

``bench/bench_audit.py`` prints the table of docs/AUDIT.md from ``audited_run``.
"""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

import numpy as np
import pytest
import torch

import dpemb.privacy.clipping as clipping
import dpemb.training.federated as fed
from dpemb.algorithms.config import FederatedConfig
from dpemb.privacy import PrivacySpec
from dpemb.privacy.canaries import CanaryClients, needs_host
from dpemb.privacy.clipping import ClipAndSum
from dpemb.privacy.noise import GaussianNoise
from dpemb.training.audit_run import NOT_FOR_RELEASE, PRIVATE_FILE, AuditError, AuditRun, k_grid
from dpemb.training.config import ModelConfig, RunConfig
from tests.conftest import make_tiny_dataset

MODEL = ModelConfig(backbone="lenet", embedding_dim=16, width=0.25)
SETTING = dict(canaries=1000, rounds=1, noise_multiplier=2.0, clip_norm=0.5, delta=1e-6, sampling_rate=1.0,
               real_users=12, noise_seed=1)
BUGS = ("a", "b", "c", "d")
BUG_NAMES = {
    None: "correct mechanism",
    "a": "(a) noise off, accountant believes z",
    "b": "(b) noise std z S / M on the sum",
    "c": "(c) no clipping",
    "d": "(d) sensitivity C where it is 2C",
}


@contextlib.contextmanager
def planted(bug: str | None, clients_per_round: int) -> Iterator[None]:
    """TEST-ONLY: plant one mechanism bug into the real training path for the block."""
    with pytest.MonkeyPatch.context() as mp:
        if bug == "a":
            mp.setattr(GaussianNoise, "add", lambda self, clipped: [v.clone() for v in clipped.value])
        elif bug == "b":
            mp.setattr(GaussianNoise, "std", lambda self, s: self.noise_multiplier * float(s) / clients_per_round)
        elif bug == "c":
            def no_clip(tensors, clip_norm):
                ts = [t.detach() for t in tensors]
                return [t.clone() for t in ts], clipping._global_norm(ts), False
            mp.setattr(clipping, "_clip", no_clip)
        elif bug == "d":  # every clip-and-sum of the block states sensitivity C, whatever K is
            real_init = ClipAndSum.__init__

            def sensitivity_c(self, template, clip_norm, sensitivity, relation):
                real_init(self, template, clip_norm, clip_norm, relation)

            mp.setattr(ClipAndSum, "__init__", sensitivity_c)
        elif bug is not None:
            raise ValueError(f"unknown planted bug {bug!r}")
        yield


def audited_run(out, *, bug: str | None = None, users_per_client: int = 1, audit_options: dict | None = None,
                **overrides) -> dict:
    """One federated audit run in ``SETTING`` (with ``overrides``); the released audit record.

    ``audit_options`` (e.g. ``score="rounds"``) go to ``AuditRun`` (``with_after_round``);
    the training loop calls its ``after_round`` after every server step."""
    s = {**SETTING, **overrides}
    splits = make_tiny_dataset(num_users=s["real_users"]).split()
    train, ev = splits.train, splits.eval
    population = train.num_users + s["canaries"]
    m = int(s["sampling_rate"] * population) // users_per_client
    spec = PrivacySpec(population=population, clients_per_round=m, users_per_client=users_per_client,
                       noise_multiplier=s["noise_multiplier"], clip_norm=s["clip_norm"], rounds=s["rounds"],
                       delta=s["delta"])
    cfg = FederatedConfig(algorithm="dp-fedemb", local_batch_size=4, server_momentum=0.0)
    run = RunConfig(out=str(out), eval_every=100, progress=False, checkpoint_interval_s=0, eval_max_pairs=200)
    torch.set_num_threads(1)
    with planted(bug, m), with_after_round(audit_options or {}):
        report = fed.train_federated(train, ev, MODEL, cfg, spec, run, noise_seed=s["noise_seed"],
                                     audit_canaries=s["canaries"])
    return report["privacy"]["audit"]


@contextlib.contextmanager
def with_after_round(options: dict) -> Iterator[None]:
    """TEST-ONLY: the loop builds ``AuditRun`` with ``options`` (score, canary kind); the
    loop itself calls ``audit.after_round(server_params)`` after every server step."""
    if not options:
        yield
        return

    class Wired(AuditRun):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, **options})

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fed, "AuditRun", Wired)
        yield


# ----------------------------------------------------------------- the audits


@pytest.fixture(scope="module")
def audit_of(tmp_path_factory):
    """``audit_of(bug, K)``: the audit record of that run in ``SETTING``, run once per module."""
    cache: dict = {}

    def get(bug: str | None = None, users_per_client: int = 1, canaries: int = SETTING["canaries"]) -> dict:
        key = (bug, users_per_client, canaries)
        if key not in cache:
            cache[key] = audited_run(tmp_path_factory.mktemp("audit"), bug=bug, users_per_client=users_per_client,
                                     canaries=canaries)
        return cache[key]

    return get


#: bug (d) needs the f-DP analysis and this many canaries (Dirac: a 16k-parameter model)
D_CANARIES = 10_000


@pytest.mark.parametrize("users_per_client, canaries", [(1, SETTING["canaries"]), (2, D_CANARIES)])
def test_correct_mechanism_stays_below_reported(audit_of, users_per_client, canaries):
    a = audit_of(None, users_per_client, canaries)
    assert a["epsilon_reported"] == pytest.approx(2.42, abs=0.05)
    assert a["epsilon_lower_bound"] <= min(a["epsilon_reported"], a["epsilon_pld"])
    assert a["epsilon_lower_bound_fdp"] <= a["epsilon_pld"] and a["mu_lower_bound"] <= a["mu_accounted"] == 0.5
    assert not a["accounted_curve_rejected"] and not a["warning"]
    assert not a["lower_bound_exceeds_reported"] and "WARNING" not in a["statement"]
    # the one-shot estimate is near the truth here (q = 1: the scores are Gaussian)
    assert a["epsilon_estimate_ci"][0] <= a["epsilon_reported"] <= 2 * a["epsilon_estimate_ci"][1]
    assert a["release"] == NOT_FOR_RELEASE and a["canaries"] == canaries
    assert a["canary_kind"] == ("gaussian" if canaries == SETTING["canaries"] else "dirac")


@pytest.mark.parametrize("bug", ["a", "b", "c"])
def test_planted_bug_is_caught_by_the_lower_bound(audit_of, bug):
    a = audit_of(bug)
    assert a["epsilon_lower_bound"] > a["epsilon_reported"] + 1.0, a["statement"]
    assert a["lower_bound_exceeds_reported"] and "WARNING" in a["statement"]
    assert a["accounted_curve_rejected"] and a["epsilon_lower_bound_fdp"] > a["epsilon_reported"] + 1.0
    assert a["epsilon_estimate"] > 3 * a["epsilon_reported"]


def test_bug_d_sensitivity_c_where_2c(audit_of):
    """Halving the noise doubles the canaries' mu (0.5 -> 1). With 10 000 canaries the
    f-DP analysis rejects the accounted curve (0.5-GDP: q = 1, one round) at 95% and
    puts mu above 0.5, so its epsilon exceeds the reported one; the correct mechanism
    passes (``test_correct_mechanism_stays_below_reported``). The (eps, delta) bound of
    Steinke et al. stays below the reported epsilon even at 10 000 canaries: the limit
    of a single (eps, delta) pair, recorded here (docs/AUDIT.md quantifies it)."""
    a, correct = audit_of("d", 2, D_CANARIES), audit_of(None, 2, D_CANARIES)
    assert a["canary_kind"] == "dirac" and a["canaries"] == D_CANARIES
    assert a["accounted_curve_rejected"] and a["warning"] and "WARNING" in a["statement"], a["statement"]
    assert a["mu_lower_bound"] > a["mu_accounted"] == 0.5
    assert a["epsilon_lower_bound_fdp"] > a["epsilon_reported"]
    assert a["epsilon_estimate_ci"][0] > a["epsilon_reported"]
    assert a["epsilon_lower_bound"] > correct["epsilon_lower_bound"]
    assert a["epsilon_lower_bound"] < a["epsilon_reported"]  # the limit of the (eps, delta) bound, recorded


def test_round_scores_through_after_round(tmp_path):
    """``score="rounds"`` with ``after_round`` after every server step (test wiring): the
    record says so, the correct mechanism passes at q = 1/2 over 2 rounds. At q = 1 and
    one round (no momentum) the round update IS the total move, so the per-round score is
    an increasing function of the final-move score: the same guesses, the same bounds."""
    per_round = audited_run(tmp_path / "r1", canaries=100, audit_options={"score": "rounds"})
    final = audited_run(tmp_path / "r2", canaries=100)
    assert per_round["score"].startswith("log-likelihood ratio") and final["score"].startswith("cosine")
    for key in ("epsilon_lower_bound", "correct_guesses", "mu_lower_bound", "fdp_correct_guesses"):
        assert per_round[key] == final[key]
    sub = audited_run(tmp_path / "r3", canaries=100, sampling_rate=0.5, rounds=2, audit_options={"score": "rounds"})
    assert sub["epsilon_lower_bound"] <= sub["epsilon_reported"] and not sub["warning"]
    assert sub["accounted_curve"].startswith("PLD curve of 2 Poisson-sampled")


def test_round_scores_need_after_round_every_round():
    spec = PrivacySpec(population=60, clients_per_round=60, noise_multiplier=1.0)
    params = [torch.nn.Parameter(torch.zeros(8))]
    audit = AuditRun(50, spec, 10, params, score="rounds", seed=0)
    acc = ClipAndSum([torch.zeros(8)], 1.0, 1.0, "add-remove")
    audit.real_slots([np.array([u]) for u in range(60)])
    audit.contribute(acc)  # one round, no after_round
    with pytest.raises(AuditError, match="after_round"):
        audit.finish(params, {"epsilon_rdp": 1.0}, None)
    with pytest.raises(AuditError, match="score"):
        AuditRun(50, spec, 10, params, score="best")


def test_canaries_join_rounds_at_the_samplers_rate():
    """Inserted canaries take part exactly when the run's Poisson sampler picks them."""
    from dpemb.privacy.sampling import VirtualClientSampler

    n, real, rounds = 400, 100, 20
    sampler = VirtualClientSampler(real + n, clients_per_round=125, users_per_client=1, seed=0)  # q = 1/4
    c = CanaryClients(n, 8, first_user=real, host=False, seed=0)
    acc = ClipAndSum([torch.zeros(8)], 1.0, 1.0, "add-remove")
    for _ in range(rounds):
        real_slots, picked = c.split_round(sampler.sample_round(), 1)
        assert all(int(s[0]) < real for s in real_slots)
        c.contribute(acc, picked)
    counts = c.participations[c.included]
    assert counts.mean() == pytest.approx(rounds / 4, rel=0.1)
    assert c.participations[~c.included].sum() == 0 and c.rounds == rounds


# ----------------------------------------------------------------- what is released


def test_audit_record_is_released_and_canaries_stay_private(tmp_path):
    a = audited_run(tmp_path / "run", canaries=40)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    card = json.loads((tmp_path / "run" / "model_card.json").read_text())
    assert report["privacy"]["audit"] == a and card["privacy"]["audit"] == a
    assert "included" not in json.dumps(report) and "key" not in a
    assert set(a) >= {"epsilon_estimate", "epsilon_lower_bound", "epsilon_reported", "confidence", "canaries", "delta"}
    assert a["population"] == {"real_users": 10, "canary_users": 40, "accounted": 50}
    assert report["privacy"]["spec"]["population"] == 50  # the accountant counts the canaries as users
    secret = json.loads((tmp_path / "run" / "private" / PRIVATE_FILE).read_text())
    assert len(secret["included"]) == len(secret["scores"]) == 40 and secret["rounds"] == 1
    assert (tmp_path / "run" / "private" / PRIVATE_FILE).stat().st_mode & 0o077 == 0
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["audit_canaries"] == 40


@pytest.mark.parametrize("change, match", [
    (dict(mechanism="tree"), "Poisson"), (dict(sampling="fixed", relation=None), "Poisson"),
    (dict(mechanism="bandmf", bands=2), "got bandmf noise"), (dict(mechanism="blt", bands=2), "got blt noise"),
    (dict(noise_multiplier=0.0, nonprivate=True), "non-private"),
])
def test_unsupported_audits_are_refused(change, match):
    spec = PrivacySpec(**{**dict(population=60, clients_per_round=5, noise_multiplier=1.0), **change})
    params = [torch.nn.Parameter(torch.zeros(4))]
    with pytest.raises(AuditError, match=match):
        AuditRun(50, spec, 10, params)


def test_resume_and_too_few_canaries_are_refused():
    spec = PrivacySpec(population=60, clients_per_round=5, noise_multiplier=1.0)
    params = [torch.nn.Parameter(torch.zeros(4))]
    with pytest.raises(AuditError, match="resumed"):
        AuditRun(50, spec, 10, params, resume=True)
    with pytest.raises(AuditError, match="at least"):
        AuditRun(5, PrivacySpec(population=15, clients_per_round=5, noise_multiplier=1.0), 10, params)
    with pytest.raises(AuditError, match="population"):
        AuditRun(50, spec, 11, params)


# ----------------------------------------------------------------- the canaries alone


def test_canaries_are_keyed_unit_directions_with_fair_coins():
    a = CanaryClients(400, 64, first_user=10, host=False, seed=3)
    b = CanaryClients(400, 64, first_user=10, host=False, seed=3)
    c = CanaryClients(400, 64, first_user=10, host=False, seed=4)
    assert np.array_equal(a.included, b.included) and torch.equal(a.direction(7), b.direction(7))
    assert not torch.equal(a.direction(7), c.direction(7))
    assert float(torch.linalg.vector_norm(a.direction(0).double())) == pytest.approx(1.0, abs=1e-6)
    assert 150 < a.included.sum() < 250  # Binomial(400, 1/2)
    big = CanaryClients(3, 10, first_user=0, host=False, seed=3)
    big._cache = None  # regenerated from the key: the same direction
    assert torch.equal(big.direction(2), CanaryClients(3, 10, first_user=0, host=False, seed=3).direction(2))


def test_split_round_takes_canary_users_out_of_the_slots():
    c = CanaryClients(20, 8, first_user=10, host=False, seed=0)
    real, picked = c.split_round([np.array([3]), np.array([12]), np.array([15])], users_per_client=1)
    assert [r.tolist() for r in real] == [[3]] and picked.tolist() == [2, 5]
    real, picked = c.split_round([np.array([1, 11]), np.array([29]), np.array([4])], users_per_client=2)
    assert [r.tolist() for r in real] == [[1], [], [4]] and picked.tolist() == [1, 19]  # slots keep positions


@pytest.mark.parametrize("host", [False, True])
def test_canary_updates_are_clipped_to_exactly_c(host):
    c = CanaryClients(30, 16, first_user=0, host=host, seed=1)
    picked = np.arange(0, 30, 2)
    acc = ClipAndSum([torch.zeros(16)], 0.5, 1.0 if host else 0.5, "add-remove")
    clipped = c.contribute(acc, picked)
    inserted_and_picked = c.included & np.isin(np.arange(30), picked)
    assert clipped.count == (30 if host else inserted_and_picked.sum())
    assert clipped.num_clipped == clipped.count  # norm 10 C: every canary is clipped
    assert all(n == pytest.approx(5.0, rel=1e-5) for n in clipped.preclip_norms)
    expect = sum((1 if inserted_and_picked[i] else -1) * 0.5 * c.direction(i).double() for i in range(30)
                 if host or inserted_and_picked[i])
    assert torch.allclose(clipped.value[0].double(), expect, atol=1e-5)
    assert needs_host(2, "add-remove") and not needs_host(1, "add-remove")


def test_dirac_canaries_are_distinct_keyed_coordinates():
    c = CanaryClients(300, 1000, first_user=0, host=False, seed=5, kind="dirac")
    d = CanaryClients(300, 1000, first_user=0, host=False, seed=5, kind="dirac")
    assert c.kind == "dirac" and torch.equal(c.direction(9), d.direction(9))
    coords = [int(torch.nonzero(c.direction(i))[0, 0]) for i in range(300)]
    assert len(set(coords)) == 300  # exactly orthogonal
    assert all(float(c.direction(i).abs().sum()) == 1.0 for i in range(0, 300, 37))
    move = torch.randn(1000, dtype=torch.float64)
    dense = np.array([float(c.direction(i).double() @ move) for i in range(300)]) / float(move.norm())
    assert c.scores(move) == pytest.approx(dense)
    assert not np.array_equal(c.included, CanaryClients(300, 1000, first_user=0, host=False, seed=6,
                                                         kind="dirac").included)
    with pytest.raises(ValueError, match="coordinates"):
        CanaryClients(30, 20, first_user=0, host=False, kind="dirac")


def test_auto_kind_is_dense_while_cached_then_dirac():
    from dpemb.privacy.canaries import CACHE_ENTRIES, choose_kind

    assert choose_kind("auto", 1000, 16_000) == "gaussian"
    assert choose_kind("auto", 10_000, 16_000) == "dirac"
    assert 10_000 * 16_000 > CACHE_ENTRIES >= 1000 * 16_000
    assert choose_kind("auto", 50_000, 16_000) == "gaussian"  # more canaries than coordinates
    with pytest.raises(ValueError):
        choose_kind("sparse", 10, 10)


def test_scores_are_cosines_with_the_move():
    c = CanaryClients(5, 32, first_user=0, host=False, seed=2)
    move = 3 * c.direction(1).double()
    s = c.scores(move)
    assert s[1] == pytest.approx(1.0, abs=1e-6) and np.all(np.abs(np.delete(s, 1)) < 0.9)
    with pytest.raises(ValueError, match="did not move"):
        c.scores(torch.zeros(32))


def test_k_grid_is_fixed_and_valid():
    for n in (20, 1000):
        grid = k_grid(n)
        assert grid == k_grid(n) and all(1 <= kp + kn <= n for kp, kn in grid)


# ----------------------------------------------------------------- the command line

CLI = ["train", "--algorithm", "dp-fedemb", "--rounds", "1", "--clients-per-round", "20", "--users-per-client", "1",
       "--embedding-dim", "16", "--width", "0.25", "--local-batch-size", "4", "--eval-every", "1", "--no-progress",
       "--delta", "1e-5", "--eval-max-pairs", "200", "--noise-seed", "1"]
NOISE = ["--noise-multiplier", "2"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("audit_cli") / "ds"
    make_tiny_dataset(num_users=12).save(path)
    return str(path)


def test_cli_audit_canaries_reports_beside_the_reported_epsilon(tmp_path, data_dir, capsys):
    from dpemb.cli.main import main

    out = tmp_path / "run"
    assert main(CLI + NOISE + ["--data", data_dir, "--out", str(out), "--audit-canaries", "30"]) == 0
    text = capsys.readouterr().out
    assert "audit run: 30 canary users join the 10 real users; the accountant counts 40 users" in text
    line = next(l for l in text.splitlines() if l.startswith("audit: "))
    assert "empirical epsilon (one-shot estimate)" in line and "lower bound" in line and "f-DP lower bound" in line
    assert "at 95% confidence" in line and "reported epsilon" in line
    assert "(RDP, delta = 1e-05, user-level, add/remove" in line
    assert NOT_FOR_RELEASE in text
    report = json.loads((out / "report.json").read_text())
    assert report["privacy"]["audit"]["canaries"] == 30 and report["privacy"]["spec"]["population"] == 40
    assert (out / "private" / PRIVATE_FILE).exists()


@pytest.mark.parametrize("extra, match", [
    (["--release-audit-run"], "give --audit-canaries"),
    (["--audit-canaries", "30", "--sampling", "fixed"], "Poisson sampling"),
    (["--audit-canaries", "5", "--clients-per-round", "5"], "at least 20 canaries"),
    (["--audit-canaries", "30", "--adaptive-clip-quantile", "0.5", "--clip-count-stddev", "20"], "adaptive clipping"),
    (["--audit-canaries", "30", "--resume", "auto"], "cannot be resumed"),
    (["--audit-canaries", "30", "--non-private"], "non-private"),
])
def test_cli_refuses_audits_it_cannot_do(tmp_path, data_dir, extra, match, capsys):
    from dpemb.cli.main import main

    argv = CLI + ([] if "--non-private" in extra else NOISE) + ["--data", data_dir, "--out", str(tmp_path / "run")]
    argv += extra
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code != 0 and match in capsys.readouterr().err
    assert not (tmp_path / "run" / "report.json").exists()


def test_cli_refuses_audit_on_centralized(tmp_path, data_dir):
    from dpemb.cli.main import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--data", data_dir, "--out", str(tmp_path / "run"), "--audit-canaries", "30"])
    assert e.value.code != 0
