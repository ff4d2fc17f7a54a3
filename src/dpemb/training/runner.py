"""From a ``TrainConfig`` to a trained run: the one path ``dpemb train``, ``dpemb audit``
and the Python API (``dpemb.train``) share.

``train`` checks the configuration against the data before any work, then runs
centralized or federated training (its steps: docs/API.md, "runner"). Every refusal is
a ``ConfigError`` naming the setting by its flag and the fix.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterator

from dpemb.data.dataset import UserDataset
from dpemb.privacy import PrivacySpec
from dpemb.privacy.spec import CYCLIC
from dpemb.training.provenance import InitProvenanceError, Provenance, check_init
from dpemb.training.run_config import NOT_PRIVACY_KNOBS, ConfigError, PerformanceFlags, PrivacyRequest, TrainConfig

#: PrivacyRequest field -> its flag, for messages
PRIVACY_FLAG = {f: "--" + f.replace("_", "-") for f in PrivacyRequest.__dataclass_fields__}
#: the noise mechanisms each federated algorithm may use, the first its default (``PrivacyRequest.mechanism``
#: None): DP-FTRL-FedEmb
#: releases prefix sums with correlated noise, from the tree or a Toeplitz strategy (BandMF, BLT)
ALGORITHM_MECHANISMS = {"dp-fedemb": ("gaussian",), "dp-fedavg": ("gaussian",),
                        "dp-ftrl-fedemb": ("tree", "bandmf", "blt")}


@contextmanager
def config_error(errors: type[Exception] = ValueError, prefix: str = "") -> Iterator[None]:
    """``errors`` raised inside become a ``ConfigError`` with the same message after ``prefix``."""
    try:
        yield
    except errors as e:
        raise ConfigError(f"{prefix}{e}") from e


def train(config: TrainConfig, out: str, *, data: UserDataset | None = None,
          perf: PerformanceFlags = PerformanceFlags(), resume: bool | str = False, overwrite: bool = False,
          public: UserDataset | None = None, audit_score: str = "final") -> dict[str, Any]:
    """Train as ``config`` says into the run directory ``out``; returns the run's report
    (also ``out/report.json``). ``data``: the dataset (default: the directory
    ``config.data.path``); ``resume`` True or "auto" continues the run in ``out``;
    ``overwrite`` replaces it whole. Under torchrun, worker ranks return their summary."""
    from dpemb.training.executor import DistributedEnv

    env = DistributedEnv.from_environ()
    if env is not None and not config.federated_run:
        raise ConfigError("centralized training runs in one process; start it without torchrun")
    if env is not None and env.rank != 0:
        perf = replace(perf, progress=False)
    run = prepare(config, out, data=data, perf=perf, resume=resume, overwrite=overwrite)
    if not config.federated_run:
        from dpemb.training.centralized import train_centralized

        print("note: centralized training is not private (no clipping, no noise, no epsilon); for "
              "user-level DP use --algorithm dp-fedemb")
        return train_centralized(run.train, run.held_out, config.model, config.optim, run.run_cfg, resume=resume,
                                 provenance=run.provenance, settings=config.to_dict())
    from dpemb.training.config import to_dict
    from dpemb.training.federated import train_federated

    request = config.privacy
    canaries = request.audit_canaries or 0  # audit run: the canaries are users of the population
    spec = resolve_privacy(config, run.train.num_users + canaries)
    if canaries:  # refuse an audit the canaries do not support; say what the run is
        from dpemb.training.audit_run import AuditError, check_audit

        with config_error(AuditError):
            check_audit(request.audit_canaries, spec, resume=resume)
        print(f"audit run: {canaries} canary users join the {run.train.num_users} real users; "
              f"the accountant counts {spec.population} users (sampling rate q = "
              f"{spec.sampling_rate:.4g}). "
              + ("Released by choice (--release-audit-run)." if request.release_audit_run else
                 "Not for release: train the production model as a separate run without "
                 "--audit-canaries."))
    if env is None or env.rank == 0:  # (advice goes to stderr, which worker ranks keep for errors)
        print_privacy_advice(request, spec)
    for c in run.caveats if request.target_epsilon is not None else []:
        print(f"  [the calibrated epsilon {c}]")
    print_planned_total(spec, run.init)
    if config.federated.public_negatives and public is None:
        public = run.dataset.split().public
        if public.num_examples == 0:
            where = config.data.path or "the dataset"
            raise ConfigError(f"--public-negatives needs public identities, and {where} has no "
                              "public split; make one with `dpemb data make ... "
                              "--public-user-fraction F` (or `dpemb data split`) or drop the flag")
    return train_federated(run.train, run.held_out, config.model, config.federated, spec, run.run_cfg,
                           noise_seed=request.noise_seed, epsilon_budget=request.epsilon_budget, resume=resume,
                           provenance=run.provenance, audit_canaries=canaries,
                           audit_release=request.release_audit_run, audit_score=audit_score,
                           public=public if config.federated.public_negatives else None,
                           settings={**config.to_dict(), "resolved": {"privacy": to_dict(spec)}},
                           extrapolate_to=request.extrapolate_to, extrapolation_accountant=request.accountant)


@dataclass(frozen=True)
class PreparedRun:
    """What a run needs before training, all checked (``prepare``)."""

    dataset: UserDataset
    train: UserDataset  # the split trained on
    held_out: UserDataset  # the split evaluated on
    run_cfg: Any  # the training loops' RunConfig
    provenance: Provenance
    init: tuple[dict[str, Any], dict[str, Any] | None] | None  # a trained init: (provenance, card privacy)
    caveats: list[str]  # what every epsilon of a DP run from that init must say


def prepare(config: TrainConfig, out: str, *, data: UserDataset | None, perf: PerformanceFlags,
            resume: bool | str, overwrite: bool) -> PreparedRun:
    """Every check before any work (privacy settings, --init, --out, the splits, the init's
    provenance: a non-private init of a DP run is refused unless allowed), with the data,
    the splits and the init's record read once."""
    from dpemb.training.artifact import ArtifactError
    from dpemb.training.config import NAMED_INITS, RunConfig
    from dpemb.training.modelinit import read_init_card
    from dpemb.training.rundir import OutDirError, check_out_dir

    check_privacy_request(config)
    init = None  # a trained --init (an artifact or run directory, never a private checkpoint):
    if config.model.init not in NAMED_INITS:  # (provenance, card privacy) from its card
        with config_error(ArtifactError, prefix="--init: "):
            init = read_init_card(config.model.init)
    with config_error(OutDirError):
        check_out_dir(out, resume=resume, overwrite=overwrite)
    if data is None and config.data.path is None:
        raise ConfigError("no data: give --data DIR (a dataset made with `dpemb data make`), "
                          "or pass a dataset")
    dataset = data if data is not None else UserDataset.load(config.data.path)
    train_split, held_out = training_splits(dataset, config)
    provenance = Provenance(dataset=config.data.path, train_split=config.data.train_split,
                            allow_nonprivate_init=config.privacy.allow_nonprivate_init)
    caveats: list[str] = []
    if config.federated_run and not config.privacy.nonprivate and init is not None:
        with config_error(InitProvenanceError):
            caveats = check_init(init[0], private_run=True, init_name=config.model.init,
                                 allow_nonprivate_init=config.privacy.allow_nonprivate_init)
    with config_error():  # every PerformanceFlags field is a RunConfig field
        run_cfg = RunConfig(out=str(out), seed=config.seed, eval_every=config.eval_every,
                            eval_max_pairs=config.eval_max_pairs, eval_split=config.data.eval_split,
                            overwrite=overwrite, **asdict(perf))
    return PreparedRun(dataset, train_split, held_out, run_cfg, provenance, init, caveats)


# ------------------------------------------------------------------------------ checks
def check_privacy_request(config: TrainConfig) -> None:
    """Refuse privacy settings that would be silently ignored, or that contradict each other."""
    r = config.privacy
    if not config.federated_run:
        default = PrivacyRequest()
        given = [PRIVACY_FLAG[f] for f in PrivacyRequest.__dataclass_fields__
                 if f not in NOT_PRIVACY_KNOBS and getattr(r, f) != getattr(default, f)]
        if r.secure_noise is False:
            given[given.index("--secure-noise")] = "--no-secure-noise"
        if given:
            raise centralized_refusal(given)
        return
    # a mechanism the algorithm does not train with (BandMF is DP-FTRL-FedEmb's: --algorithm
    # dp-ftrl-fedemb --mechanism bandmf --bands B), and --bands or cyclic-poisson without BandMF or BLT
    own = ALGORITHM_MECHANISMS[config.algorithm]
    if r.mechanism is not None and r.mechanism not in own:
        algorithm = next(a for a, m in ALGORITHM_MECHANISMS.items() if r.mechanism in m)
        noises = own[0] if len(own) == 1 else f"{', '.join(own[:-1])} or {own[-1]}"
        raise ConfigError(f"--mechanism {r.mechanism} with --algorithm {config.algorithm}, whose noise is {noises}: "
                          f"use --algorithm {algorithm} for {r.mechanism} noise, or drop --mechanism")
    if r.mechanism not in CYCLIC and (r.sampling == "cyclic-poisson" or r.bands != 1):
        cyclic = r.sampling == "cyclic-poisson"
        flag = "--sampling cyclic-poisson" if cyclic else f"--bands {r.bands}"
        raise ConfigError(f"{flag} applies to BandMF and BLT noise only: add --algorithm dp-ftrl-fedemb "
                          f"--mechanism bandmf (or blt), or drop {flag.split()[0]}")
    given = [x is not None for x in (r.noise_multiplier, r.target_epsilon)] + [r.nonprivate]
    if sum(given) != 1:
        raise ConfigError("give exactly one of --noise-multiplier, --target-epsilon or --non-private")
    if r.secure_noise and r.noise_seed is not None:
        raise ConfigError(
            "--secure-noise cannot be combined with --noise-seed: the secure sampler is keyed afresh from the OS on "
            "every draw. A seeded run is a reproducible experiment (plain sampler, reported as SEEDED)"
        )
    if r.release_audit_run and r.audit_canaries is None:
        raise ConfigError("--release-audit-run applies to an audit run: give --audit-canaries N too")
    if r.audit_canaries is not None and r.nonprivate:
        raise ConfigError("--audit-canaries with --non-private: an audit compares with the reported epsilon, "
                          "and a non-private run has none")
    if r.secure_noise and r.nonprivate:
        raise ConfigError("--secure-noise with --non-private: a non-private run adds no noise to harden")
    if r.adaptive_clip_quantile is None and (r.clip_lr is not None or r.clip_count_stddev is not None):
        raise ConfigError("--clip-lr and --clip-count-stddev apply to adaptive clipping: give "
                          "--adaptive-clip-quantile GAMMA too (or drop them for a fixed --clip-norm)")


def centralized_refusal(flags: list[str]) -> ConfigError:
    """Privacy settings given to centralized training, which would ignore them."""
    return ConfigError(
        f"{', '.join(flags)} given with --algorithm centralized, which is not private: it neither "
        "clips nor adds noise and ignores every privacy flag. For user-level DP choose --algorithm "
        "dp-fedemb (or dp-fedavg, dp-ftrl-fedemb); for a non-private baseline drop the privacy flags")


def check_cohort(clients_per_round: int, users_per_client: int, num_users: int) -> None:
    """A round must not ask for more users than the population holds (M K <= N): an
    error that names the defaults and suggests a K that fits."""
    m, k = clients_per_round, users_per_client
    if m >= 1 and k >= 1 and num_users >= 1 and m * k > num_users:
        fit = max(1, num_users // (2 * m))
        d = PrivacyRequest()
        raise ConfigError(
            f"{m} virtual clients of {k} users per round need {m * k} users, but the population (the "
            f"training users, plus any audit canaries) has {num_users}. The defaults (--clients-per-round "
            f"{d.clients_per_round} --users-per-client {d.users_per_client}) suit populations of a few hundred "
            f"users or more; here try --users-per-client {fit} (about half the users per round), or fewer "
            "--clients-per-round")


def training_splits(dataset: UserDataset, config: TrainConfig) -> tuple[UserDataset, UserDataset]:
    """(the split to train on, the held-out split to evaluate on); ConfigError when either is empty."""
    from dpemb.data.splits import held_out_subsets

    splits = dataset.split()
    where = config.data.path or "the dataset"
    with config_error():
        validation, test = held_out_subsets(splits, config.data.eval_max_examples)
    held_out = test if config.data.eval_split == "test" else validation
    if held_out.num_examples == 0:
        flag = "--eval-identity-fraction" if config.data.eval_split == "test" else "--validation-identity-fraction"
        raise ConfigError(
            f"{where} has no {config.data.eval_split} split (held-out identities with their own "
            f"users); make it with `dpemb data make ... {flag} F` (F > 0; the default holds out "
            f"0.1) or re-split it with `dpemb data split {where}`"
        )
    train_split = splits.get(config.data.train_part)
    if train_split.num_examples == 0:
        raise ConfigError(f"the {config.data.train_split} split of {where} is empty")
    return train_split, held_out


def training_users(config: TrainConfig) -> int | None:
    """The users a run of ``config`` trains on (its ``data.train_split`` of ``data.path``;
    audit canaries not counted); None when it names no dataset."""
    if config.data.path is None:
        return None
    return UserDataset.load(config.data.path).split().get(config.data.train_part).num_users


# ------------------------------------------------------------------------------ privacy
def resolve_privacy(config: TrainConfig, population: int) -> PrivacySpec:
    """The ``PrivacySpec`` of a federated run of ``population`` users (the training users
    plus any audit canaries): the request's noise multiplier, or the one calibrated for
    its target epsilon (printed), with adaptive clipping's split of it; checked against
    the server schedule and the epsilon budget."""
    from dpemb.algorithms.server import check_server_schedule
    from dpemb.privacy import calibrated_spec, check_epsilon_budget, describe_epsilon
    from dpemb.privacy.statements import describe_schedule

    r = config.privacy
    check_privacy_request(config)
    check_cohort(r.clients_per_round, r.users_per_client, population)
    fields = dict(
        population=population, clients_per_round=r.clients_per_round, users_per_client=r.users_per_client,
        clip_norm=r.clip_norm, rounds=r.rounds, delta=r.delta, sampling=r.sampling,
        mechanism=ALGORITHM_MECHANISMS[config.algorithm][0] if r.mechanism is None else r.mechanism,
        bands=r.bands, nonprivate=r.nonprivate,
        tree_restarts=r.tree_restarts, allow_large_delta=r.allow_large_delta, secure_noise=r.resolved_secure_noise,
    )
    with config_error():
        check_server_schedule(config.federated, r.rounds)  # --server-lr-warmup < --rounds
        if r.target_epsilon is None:
            spec = PrivacySpec(noise_multiplier=0.0 if r.nonprivate else r.noise_multiplier, **fields)
        elif r.target_population is not None:
            spec = calibrated_at_population(r, fields, population)
        else:
            spec = calibrated_spec(r.target_epsilon, r.accountant, **fields)
            print(f"calibrated noise multiplier z = {spec.noise_multiplier:.4f} for "
                  + describe_epsilon(r.target_epsilon, accountant=r.accountant, delta=spec.resolved_delta,
                                     unit=spec.unit, relation=spec.relation, schedule=describe_schedule(spec)))
        if r.adaptive_clip_quantile is not None:  # after calibration: epsilon depends on the total z only
            from dpemb.privacy.adaptive_clipping import DEFAULT_LEARNING_RATE, AdaptiveClipping
            from dpemb.privacy.statements import describe_adaptive_clipping

            spec = replace(spec, adaptive_clipping=AdaptiveClipping(
                r.adaptive_clip_quantile, DEFAULT_LEARNING_RATE if r.clip_lr is None else r.clip_lr,
                r.clip_count_stddev))
            print(describe_adaptive_clipping(spec))
    with config_error(prefix=f"--epsilon-budget {r.epsilon_budget}: "):
        check_epsilon_budget(r.epsilon_budget, spec)
    return spec


def calibrated_at_population(r: PrivacyRequest, fields: dict[str, Any], population: int) -> PrivacySpec:
    """The spec whose run, EXTRAPOLATED to ``r.target_population`` users by the paper's
    convention (noise multiplier and clients per round scaled by the same factor: the
    same noise on the average), has ``r.target_epsilon``; prints both epsilons, the
    extrapolation labelled as such."""
    from dpemb.privacy import calibrate_extrapolated, describe_epsilon, epsilon_for, extrapolate
    from dpemb.privacy.advice import PLD_MAX_RDP_EPSILON
    from dpemb.privacy.statements import describe_schedule

    with config_error(prefix="--target-population: "):
        spec = calibrate_extrapolated(PrivacySpec(noise_multiplier=1.0, **fields), r.target_epsilon,
                                      r.target_population, r.accountant)
    ex = extrapolate(spec, r.target_population, r.accountant)
    own, own_accountant = epsilon_for(spec, "rdp"), "rdp"  # PLD only where it is not vacuous (its cost ~ 1/z^2)
    if r.accountant == "pld" and own <= PLD_MAX_RDP_EPSILON:
        own, own_accountant = epsilon_for(spec, "pld"), "pld"
    kw = dict(accountant=r.accountant, unit=spec.unit, relation=spec.relation, schedule=describe_schedule(spec))
    print(f"calibrated noise multiplier z = {spec.noise_multiplier:.4f} so that this run EXTRAPOLATED to "
          f"{r.target_population:,} users (the paper's convention: {ex.clients_per_round:,} clients per round and "
          f"noise multiplier {ex.noise_multiplier:.4g}, the same noise on the average; {ex.delta_note}) has "
          + describe_epsilon(ex.epsilon, delta=ex.delta, **kw)
          + f". This run's own epsilon, on its {population:,} users: "
          + describe_epsilon(own, delta=spec.resolved_delta, **{**kw, "accountant": own_accountant}))
    return spec


def print_privacy_advice(request: PrivacyRequest, spec: PrivacySpec) -> None:
    """The small-cohort / weak-guarantee / large-delta advice of `dpemb account`, before training."""
    from dpemb.privacy.advice import cohort_warnings
    from dpemb.privacy.events import epsilon_for

    eps = request.target_epsilon
    if eps is None and not spec.nonprivate:
        try:
            eps = epsilon_for(spec, "rdp")
        except ValueError:  # accountant limits: the advice is printed without the epsilon rule
            eps = None
    if eps is not None and request.epsilon_budget is not None:
        eps = min(eps, request.epsilon_budget)
    for w in cohort_warnings(spec, eps):
        print(f"warning: {w}", file=sys.stderr)


def print_planned_total(spec: PrivacySpec, init: tuple[dict[str, Any], dict[str, Any] | None] | None) -> None:
    """For a DP run from a DP init (``train``) that trained on these users: the
    total epsilon (RDP) of both trainings once this run has spent its planned rounds."""
    if spec.nonprivate or init is None:
        return
    from dpemb.privacy import compute_epsilon
    from dpemb.privacy.events import event_to_dict, training_event
    from dpemb.training.artifact import init_total
    from dpemb.training.config import to_dict

    event = training_event(spec)
    eps = compute_epsilon(event, spec.resolved_delta, "rdp", relation=spec.relation)
    planned = {"spec": to_dict(spec), "dp_event": event_to_dict(event), "epsilon_rdp": float(eps)}
    total = init_total(planned, *init)
    if total is not None:
        print(f"after {spec.rounds} rounds, {total['statement']}")
