"""What a federated run records after each round, and its final report.

Released (``metrics.jsonl``, ``report.json``, the plots): the round, its epsilon, the
clip norm (adaptive clipping: a function of earlier noised counts only) and evaluations on
held-out users never trained on. Private (``private/diagnostics.jsonl``): the un-noised
statistics of each round's clients and the timings they imply (each field: docs/PRIVACY.md,
"What is released, what is private"). ``plot_training`` draws the released records.

The privacy section of the report and model card (``privacy_report``) holds only what the
guarantee covers (the spec, the ledger's rounds and public knobs, the epsilons and their
``dp_event``, for tree aggregation also ``dp_event_pld``), never a private statistic.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Sequence

from dpemb.algorithms.config import FederatedConfig
from dpemb.algorithms.round import RoundStats, round_stats
from dpemb.atomic import atomic_write
from dpemb.data.dataset import UserDataset
from dpemb.metrics import plot_roc
from dpemb.privacy import advice
from dpemb.privacy import (PrivacyLedger, PrivacySpec, PrivacySpecError,
                                      describe_epsilon, epsilon_for, extrapolate,
                                      supported_accountants)
from dpemb.privacy.adaptive_clipping import AdaptiveClipState
from dpemb.privacy.clipping import ClippedSum
from dpemb.privacy.events import event_to_dict
from dpemb.privacy.noise import describe_sampler
from dpemb.privacy.spec import ACCOUNTANTS
from dpemb.privacy.statements import NONPRIVATE_STATEMENT, describe_adaptive_clipping, describe_schedule
from dpemb.progress import progress
from dpemb.training.config import RunConfig, to_dict
from dpemb.training.rundir import RunDir

# PLD is tight but its cost grows with epsilon: beyond these RDP epsilons it is computed
# only at evaluation rounds, then not at all (the guarantee is vacuous by then anyway).
PLD_EVERY_ROUND_MAX_RDP_EPSILON = 50.0
PLD_MAX_RDP_EPSILON = advice.PLD_MAX_RDP_EPSILON

PRIVATE_LABEL = "[private diagnostic: an un-noised statistic of the private users; keep this log private] "
METRIC_PREFIXES = ("recall", "roc", "prec", "map")


def epsilons(ledger: PrivacyLedger, spec: PrivacySpec, *, with_pld: bool = True) -> dict[str, Any]:
    """Epsilon from every accountant that supports the mechanism; None where one does
    not (PLD for tree aggregation) or where PLD is skipped (see the limits above)."""
    out: dict[str, Any] = {f"epsilon_{a}": None for a in ACCOUNTANTS}
    if spec.nonprivate:
        return out | {"privacy": "not private"}
    ok = supported_accountants(spec)
    if "rdp" in ok:
        out["epsilon_rdp"] = ledger.epsilon("rdp")
    if "pld" in ok and with_pld and (out["epsilon_rdp"] or 0.0) <= PLD_MAX_RDP_EPSILON:
        out["epsilon_pld"] = ledger.epsilon("pld")
    return out


#: populations a finished run's epsilon is extrapolated to (the paper's convention)
EXTRAPOLATE_TO = (1_000_000, 10_000_000)


def adaptive_clipping_report(spec: PrivacySpec, clip_state: AdaptiveClipState | None) -> dict[str, Any]:
    """Adaptive clipping's knobs, the split of z and the clip norms (all public)."""
    a = spec.adaptive_clipping
    final = clip_state.clip_norm if clip_state is not None else None
    out: dict[str, Any] = {
        "target_quantile": a.target_quantile, "clip_learning_rate": a.learning_rate,
        "initial_clip_norm": spec.clip_norm, "final_clip_norm": final,
        "count_stddev": spec.count_stddev, "count_sensitivity": spec.count_sensitivity,
        "expected_reporting_clients": spec.expected_reporting_clients,
        "noise_multiplier_total": spec.noise_multiplier, "noise_multiplier_value": spec.value_noise_multiplier,
        "count_noised": not spec.nonprivate,
    }
    out["statement"] = (
        f"adaptive clipping: target quantile {a.target_quantile:g}, clip norm {spec.clip_norm:.4g}"
        + (f" -> {final:.4g}" if final is not None else "") + "; " + describe_adaptive_clipping(spec)
    )
    return out


def privacy_report(spec: PrivacySpec, ledger: PrivacyLedger, seeded: bool,
                   clip_state: AdaptiveClipState | None = None, *,
                   extrapolate_to: tuple[int, ...] = EXTRAPOLATE_TO, accountant: str = "rdp") -> dict[str, Any]:
    """Every epsilon with its accountant, delta, unit and neighbouring relation; and the
    epsilon (``accountant``'s) of the run extrapolated to each population of
    ``extrapolate_to`` larger than its own, labelled as an extrapolation."""
    out: dict[str, Any] = {"spec": to_dict(spec), "noise_seeded": seeded, "rounds_composed": ledger.rounds,
                           "dp_event": event_to_dict(ledger.dp_event())}
    if spec.adaptive_clipping is not None:
        out["adaptive_clipping"] = adaptive_clipping_report(spec, clip_state)
    if spec.nonprivate:
        out["statement"] = NONPRIVATE_STATEMENT
        return out
    out["noise_sampler"] = describe_sampler(spec.secure_noise, seeded)
    if "pld" in supported_accountants(spec) and ledger.dp_event("pld") != ledger.dp_event():
        out["dp_event_pld"] = event_to_dict(ledger.dp_event("pld"))
    kw = dict(delta=spec.resolved_delta, unit=spec.unit, relation=spec.relation, schedule=describe_schedule(spec))
    for a, eps in epsilons(ledger, spec).items():
        a = a.removeprefix("epsilon_")
        out[f"epsilon_{a}"] = eps
        out[f"statement_{a}"] = (
            describe_epsilon(eps, accountant=a, **kw) if eps is not None
            else f"{a.upper()} epsilon not computed ("
            + ("unsupported for this mechanism" if a not in supported_accountants(spec)
               else f"RDP epsilon exceeds {PLD_MAX_RDP_EPSILON:g}; the guarantee is vacuous") + ")"
        )
    spent = replace(spec, rounds=max(ledger.rounds, 1))
    out["extrapolated"] = []
    for n in sorted(set(extrapolate_to)):
        if n <= spec.population:
            continue
        try:
            ex = extrapolate(spent, n, accountant)
        except PrivacySpecError as e:  # the scaled noise multiplier leaves the accountant's range
            out["extrapolated"].append({"population": n, "statement": f"not extrapolated to {n:,} users: {e}"})
            continue
        out["extrapolated"].append({
            "population": n, "factor": ex.factor, "noise_multiplier": ex.noise_multiplier,
            "clients_per_round": ex.clients_per_round, f"epsilon_{accountant}": ex.epsilon, "accountant": accountant,
            "delta": ex.delta, "delta_note": ex.delta_note,
            "statement": describe_epsilon(ex.epsilon, accountant=accountant, **{**kw, "delta": ex.delta})
            + f" if {n:,} users took part with noise {spec.noise_multiplier:g} x {ex.factor:g} and "
              f"{ex.clients_per_round:,} clients per round (same noise on the average; {ex.delta_note})",
        })
    return out


def diagnostics(stats: RoundStats) -> dict[str, Any]:
    """A round's un-noised statistics of the sampled users (PRIVATE: they are not
    covered by the guarantee and go to ``private/diagnostics.jsonl`` only)."""
    return {
        "train_loss": stats.loss, "clients": stats.clients, "users": stats.users, "examples": stats.examples,
        "preclip_norm_mean": stats.preclip_norm_mean, "fraction_clipped": stats.fraction_clipped,
        "nonfinite_deltas": stats.nonfinite, "unclipped_clients": stats.unclipped,
    }


#: a public warning when the server model's norm first exceeds this many times its initial norm
NORM_RATIO_WARNING = 10.0
#: mean pre-clip norm (in clip norms) above which local training counts as exploding (private)
EXPLODING_PRECLIP = 1e6
#: the private line on diverged clients repeats at most every this many rounds unless it worsens
DIVERGED_CLIENTS_EVERY = 20


def diverged_clients_line(rnd: int, stats: RoundStats, clip_norm: float) -> str | None:
    """The curator's console line when clients' local training diverged (PRIVATE: counts
    and norms of the sampled users; printed with ``PRIVATE_LABEL``, never released)."""
    if stats.nonfinite:
        what = (f"round {rnd}: {stats.nonfinite} of {stats.clients} clients' local training diverged "
                "(non-finite loss or update); their deltas were replaced by zeros, so the model moves by "
                "the other clients' updates and the noise")
    elif stats.preclip_norm_mean > EXPLODING_PRECLIP * clip_norm:
        what = (f"round {rnd}: the clients' updates before clipping average {stats.preclip_norm_mean:.3g}, "
                f"{stats.preclip_norm_mean / clip_norm:.2g} x the clip norm: local training is exploding")
    else:
        return None
    return (f"warning: {what}. Likely causes: the noise on the model (see the small-cohort warning and "
            "`dpemb account`), or a --client-lr too high for this backbone; lower --client-lr, raise "
            "--clients-per-round, or start from a pretrained --init.")


def zero_delta_warning(cfg: FederatedConfig, rnd: int) -> str:
    """What to say when every client of a round sent an all-zero backbone delta."""
    msg = f"warning: round {rnd}: every client's backbone delta was exactly zero, so the model does not move."
    if cfg.algorithm != "dp-fedavg" and cfg.head_init == "zeros":
        msg += (" A zero-initialised fresh head passes no gradient to the backbone on the first local"
                " step, so a client needs at least 2 local steps: lower --local-batch-size, raise"
                " --local-epochs, or use --head-init glorot.")
    return msg


def plot_training(records: Sequence[dict[str, Any]], path: str | Path, *,
                  x: str = "step") -> Path | None:
    """Released quantities over the run: evaluation metrics (on users never trained on)
    at every evaluation, and epsilon at every round (private runs) or the training loss
    (non-private runs, which release no guarantee). ``records`` are metrics.jsonl's."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = [r for r in records if "recall_at_far_0.001" in r]
    if not records:
        return None
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    xs = [r[x] for r in recs]
    for key, label in [
        ("recall_at_far_0.001", "Recall@FAR=1e-3 (exact, all pairs)"),
        ("recall_at_far_0.001_in_batch_approx", "Recall@FAR=1e-3 (in-batch approx.)"),
        ("recall_at_far_0.01", "Recall@FAR=1e-2"),
    ]:
        ax[0].plot(xs, [r.get(key) for r in recs], marker="o", ms=3, label=label)
    ax[0].set_xlabel(x)
    ax[0].set_ylabel("recall on held-out users and identities")
    ax[0].legend(fontsize=8)
    ax[0].grid(alpha=0.3)
    curves = {  # a log axis: epsilon 0 (round 0) is left out
        key: [(r[x], r[key]) for r in records if r.get(key) is not None and r[key] > 0]
        for key in ("epsilon_rdp", "epsilon_pld")
    }
    if any(curves.values()):
        every = max(len(pts) for pts in curves.values())
        for key, pts in curves.items():
            if pts:  # PLD may be computed at evaluations only: drawn as its points, not a spike
                sparse = len(pts) < every
                ax[1].plot(*zip(*pts), marker="o" if sparse else None, ms=4,
                           linestyle=":" if sparse else "-",
                           label=key.removeprefix("epsilon_").upper()
                           + (" (at evaluations)" if sparse else ""))
        ax[1].set_ylabel("epsilon spent (user level)")
        ax[1].set_yscale("log")
        ax[1].legend(fontsize=8)
    else:
        loss = [(r[x], r["train_loss"]) for r in records if r.get("train_loss") is not None]
        if loss:
            ax[1].plot(*zip(*loss), marker="o", ms=3)
        ax[1].set_ylabel("train loss (not private)")
    ax[1].set_xlabel(x)
    ax[1].grid(alpha=0.3)
    fig.tight_layout()
    out = atomic_write(path, lambda p: fig.savefig(p, dpi=110, format="png"))
    plt.close(fig)
    return out


class RoundLog:
    """The records of one federated run (module docstring): the progress bar, the
    released metrics with their epsilons, the private diagnostics, the report.

    ``evaluate()`` returns the held-out metrics and the verification result (ROC)."""

    def __init__(self, run: RunDir, spec: PrivacySpec, ledger: PrivacyLedger, fed_cfg: FederatedConfig,
                 run_cfg: RunConfig, evaluate: Callable[[], tuple[dict[str, Any], Any]], start_round: int) -> None:
        self.run, self.spec, self.ledger, self.fed_cfg, self.run_cfg = run, spec, ledger, fed_cfg, run_cfg
        self.evaluate = evaluate
        self.pld_every_round = spec.nonprivate or "rdp" not in supported_accountants(spec) or (
            epsilon_for(spec, "rdp") <= PLD_EVERY_ROUND_MAX_RDP_EPSILON)
        self.start_round, self.seen, self.warned_zero_delta, self.last_ver = start_round, 0, False, None
        self.diverged_said: tuple[int, float] | None = None  # (round, fraction) last said
        self.warned_norm = False
        self.bar = progress(total=spec.rounds, initial=start_round, desc=fed_cfg.algorithm, unit="round",
                            enabled=run_cfg.progress)
        if start_round == 0:  # round 0: the initialisation's score (pretrained-only, or random)
            self.record(0, evaluated=True)
        self.t0 = time.perf_counter()

    def record(self, rnd: int, *, evaluated: bool, **extra: Any) -> None:
        """Append round ``rnd``'s released record (its epsilons; evaluated: the metrics)."""
        rec: dict[str, Any] = {"round": rnd, **epsilons(self.ledger, self.spec,
                                                        with_pld=self.pld_every_round or evaluated)}
        if evaluated:
            metrics, self.last_ver = self.evaluate()
            rec.update(metrics)
            self.bar.set_postfix(r1e3=f"{metrics['recall_at_far_0.001']:.3f}")
        self.run.append_metrics({**rec, **extra})

    def round_done(self, rnd: int, clipped: ClippedSum, tally: Any, *, seconds: float, collective_seconds: float,
                   clip_used: float | None, norm_ratio: float = 1.0, client_seconds: Sequence[float] = ()) -> bool:
        """Record round ``rnd`` (private diagnostics, released metrics); whether it evaluated.
        ``norm_ratio``: the server model's norm over its initial norm (public); ``client_seconds``:
        each rank's time training its clients (private timing)."""
        stats = round_stats(clipped, tally)
        if stats.clients and stats.nonfinite == 0 and stats.preclip_norm_mean == 0.0 and not self.warned_zero_delta:
            self.warned_zero_delta = True
            self.bar.write(PRIVATE_LABEL + zero_delta_warning(self.fed_cfg, rnd), file=sys.stderr)
        self._say_diverged(rnd, stats, clip_used if clip_used is not None else self.spec.clip_norm)
        if norm_ratio > NORM_RATIO_WARNING and not self.warned_norm:  # from the released model: public
            self.warned_norm = True
            limit = self.fed_cfg.divergence_norm_ratio
            self.bar.write(
                f"warning: round {rnd}: the model's norm is {norm_ratio:.3g} x its initial norm: the noise may be "
                "swamping the updates" + (f"; training stops at {limit:g} x (--divergence-norm-ratio)" if limit
                                           else ""), file=sys.stderr)
        self.seen += stats.examples  # local training examples processed (epochs included)
        self.run.append_diagnostics({"round": rnd, **diagnostics(stats), "seconds": seconds,
                                     "collective_seconds": collective_seconds,
                                     "client_seconds": [round(t, 6) for t in client_seconds]})
        is_eval = rnd % self.run_cfg.eval_every == 0 or rnd == self.spec.rounds
        self.record(rnd, evaluated=is_eval, model_norm_ratio=norm_ratio,
                    **({"clip_norm": clip_used} if clip_used is not None else {}))
        self.bar.update(1)
        return is_eval

    def _say_diverged(self, rnd: int, stats: RoundStats, clip: float) -> None:
        """The private line on diverged clients: the first time, when the fraction grows,
        and otherwise at most every ``DIVERGED_CLIENTS_EVERY`` rounds."""
        line = diverged_clients_line(rnd, stats, clip) if stats.clients else None
        if line is None:
            return
        frac = stats.nonfinite / stats.clients
        last = self.diverged_said
        if last is None or frac > last[1] or rnd - last[0] >= DIVERGED_CLIENTS_EVERY:
            self.diverged_said = (rnd, frac)
            self.bar.write(PRIVATE_LABEL + line, file=sys.stderr)

    def close(self) -> None:
        """The rounds are over: the bar closes and the training time stops."""
        self.bar.close()
        self.elapsed = time.perf_counter() - self.t0

    def needs_final_evaluation(self, stopped_early: bool) -> bool:
        """Whether the last record lacks an evaluation of the model as it ends."""
        return stopped_early or self.last_ver is None or \
            self.run.read_metrics()[-1].get("recall_at_far_0.001") is None

    def incomplete_report(self, released_round: int | None, *, reason: str, privacy: dict[str, Any],
                          provenance: Any) -> dict[str, Any]:
        """The report (released) of a run that stopped before its planned rounds (a signal,
        a divergence): what its release in the run directory is (``status`` as the model
        card says it, the round of its last checkpoint), why it stopped, and the
        evaluations it made up to that round; ``privacy`` covers every round it ran."""
        planned = self.spec.rounds
        done = released_round or 0
        records = [r for r in self.run.read_metrics() if r.get("round", 0) <= done]
        evaluated = [r for r in records if "recall_at_far_0.001" in r]
        return {
            "algorithm": self.fed_cfg.algorithm,
            "status": f"incomplete: stopped at round {done} of {planned}"
            + ("" if released_round is not None else " (no checkpoint was written: nothing released)"),
            "stopped_because": reason,
            "rounds": done, "planned_rounds": planned,
            "privacy": privacy,
            "provenance": provenance,
            "eval_split": self.run_cfg.eval_split,
            "initial": {k: v for k, v in evaluated[0].items() if k.startswith(METRIC_PREFIXES)} if evaluated else {},
            "last_evaluated": ({"round": evaluated[-1]["round"],
                                **{k: v for k, v in evaluated[-1].items() if k.startswith(METRIC_PREFIXES)}}
                               if evaluated else {}),
        }

    def report(self, rnd: int, *, stopped_by_budget: bool, privacy: dict[str, Any], provenance: Any,
               train: UserDataset, eval_ds: UserDataset, processes: int) -> dict[str, Any]:
        """The run's report (released) and the plots; the throughput and the counts of the
        private data go to the private diagnostics."""
        elapsed = self.elapsed
        records = self.run.read_metrics()
        final = [r for r in records if "recall_at_far_0.001" in r][-1]
        plot_roc({self.fed_cfg.algorithm: self.last_ver}, self.run.path / "roc.png",
                 title=f"ROC on the {self.run_cfg.eval_split} split (held-out users and identities)")
        plot_training(records, self.run.path / "training.png", x="round")
        self.run.append_diagnostics({
            "summary": True, "round": rnd, "train_examples": train.num_examples,
            "train_identities": train.num_classes, "processes": processes,
            "images_per_second": self.seen / elapsed if elapsed > 0 and self.seen else None,
            "rounds_per_second": (rnd - self.start_round) / elapsed if elapsed > 0 and rnd > self.start_round
            else None,
        })
        return {
            "algorithm": self.fed_cfg.algorithm,
            "status": "complete",  # (a run stopped early writes incomplete_report instead)
            "loss": to_dict(self.fed_cfg.loss),
            "rounds": rnd,
            "stopped_by_epsilon_budget": stopped_by_budget,
            "privacy": privacy,
            "provenance": provenance,
            # N is the population the accountant's sampling rate uses, treated as public
            "train_users": train.num_users, "eval_split": self.run_cfg.eval_split,
            "eval_identities": eval_ds.num_classes,
            "initial": {k: v for k, v in records[0].items() if k.startswith(METRIC_PREFIXES)},
            "final": {k: v for k, v in final.items() if k.startswith(METRIC_PREFIXES)},
        }
