"""User-level DP federated training: DP-FedEmb, DP-FedAvg, DP-FTRL-FedEmb.

Read top to bottom. Each round:
  1. sample users and group them into virtual clients  (privacy.sampling)
  2. every virtual client trains locally               (algorithms.client)
  3. clip each delta and sum                           (privacy.clipping)
  4. add Gaussian (or tree) noise to the SUM           (privacy.noise / privacy.tree)
     (adaptive clipping: also release the noised count of clients at or below the clip,
     and move the clip for the next round; privacy.adaptive_clipping)
  5. divide by the expected number of clients (public) and take a server step
  6. advance the privacy ledger                        (privacy accounting)
Evaluation on held-out identities every ``eval_every`` rounds; an atomic checkpoint
holds everything needed to resume exactly (model, server optimizer, sampler, noise,
tree, ledger, data RNGs) plus the fingerprint of the privacy spec.

Privacy guarantee: (epsilon, delta)-DP at the USER level for the released sequence
of models, under the neighbouring relation of ``spec.relation``, as computed by the
ledger for the rounds actually run.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch.nn.utils import parameters_to_vector

from dpemb.algorithms.client import ClientTrainer, glorot_
from dpemb.algorithms.batched_client import BatchedClientTrainer
from dpemb.algorithms.config import FederatedConfig, LocalPerformance
from dpemb.algorithms.round import ClientData, server_step
from dpemb.algorithms.server import check_server_schedule, make_server_optimizer, server_lr_at, set_server_lr
from dpemb.data.dataset import UserDataset
from dpemb.data.tensors import resolve_device
from dpemb.privacy.accounting import (
    PrivacyLedger,
    PrivacySpec,
    describe_epsilon,
    extrapolate,
    supported_accountants,
)
from dpemb.privacy.adaptive_clipping import AdaptiveClipState
from dpemb.privacy.client_keys import ClientRandomness
from dpemb.privacy.noise import describe_sampler
from dpemb.privacy.plan import PrivacyPlan
from dpemb.privacy.statements import describe_adaptive_clipping
from dpemb.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from dpemb.training.config import ModelConfig, RunConfig, config_json, describe_differences, to_dict
from dpemb.training.errors import TrainingDiverged
from dpemb.training.executor import DistributedExecutor, LocalExecutor, RankFailure, join_job, leave_distributed
from dpemb.training.interrupt import CheckpointSchedule, GracefulStop
from dpemb.training.resume import check_same_config, resume_from_checkpoint
from dpemb.training.evaluate import evaluate_embeddings
from dpemb.training.modelinit import build_model
from dpemb.training.artifact import Release
from dpemb.training.audit_run import AuditRun
from dpemb.training.provenance import Provenance
from dpemb.training.round_log import PLD_MAX_RDP_EPSILON, RoundLog, epsilons
from dpemb.training.rundir import RunDir

EXTRAPOLATE_TO = (1_000_000, 10_000_000)


def divergence_message(spec: PrivacySpec, cfg: FederatedConfig, rnd: int, run: RunDir) -> str:
    """Which round, the likely cause and what to do, from public quantities only."""
    per_coord = spec.value_noise_multiplier * spec.sensitivity / spec.clients_per_round
    return (
        f"training diverged at round {rnd}: the model has non-finite weights after the server step, so "
        f"training stopped (the last checkpoint in {run.path} is intact). The likely cause is the noise on "
        f"the average update: z x sensitivity / M = {spec.value_noise_multiplier:.3g} x {spec.sensitivity:.3g} / "
        f"{spec.clients_per_round} = {per_coord:.2e} per coordinate, applied with server lr "
        f"{cfg.server_lr:g}. What to do: more clients per round (--clients-per-round; at a fixed epsilon "
        "the noise on the average falls with M), a larger population or a larger --target-epsilon, a lower "
        "--server-lr, or a smaller --clip-norm. `dpemb account` shows the noise a cohort implies."
    )


def train_federated(
    train: UserDataset,
    eval_ds: UserDataset,
    model_cfg: ModelConfig,
    fed_cfg: FederatedConfig,
    spec: PrivacySpec,
    run_cfg: RunConfig,
    *,
    noise_seed: int | None = None,
    epsilon_budget: float | None = None,
    resume: bool | str = False,
    provenance: Provenance | None = None,
    audit_canaries: int = 0,
    audit_release: bool = False,
    audit_score: str = "final",
) -> dict[str, Any]:
    """Train with user-level DP; returns the report (also ``<out>/report.json``).

    ``provenance``: the dataset and split trained on, recorded in the checkpoint and
    the release artifact (``model.safetensors`` + ``model_card.json``, written with
    every checkpoint); its ``allow_nonprivate_init`` lets a DP run start from a model
    that saw private users without DP (``build_model`` refuses it otherwise).

    ``noise_seed`` None draws the noise and sampling seeds from the OS's secure
    source; give one only for a reproducible experiment (the report says so).

    ``audit_canaries`` n > 0: an AUDIT run with n canary users, users N..N+n-1 of
    ``spec.population`` = N + n (``dpemb.training.audit_run``); the report's privacy
    section gets the audit, marked not for release unless ``audit_release``;
    ``audit_score`` "final" (the final model's move) or "rounds" (every round's update).

    Under torchrun (``WORLD_SIZE`` > 1) the round's clients run on every rank
    (``dpemb.training.executor``); rank 0 does everything else and returns the report,
    the other ranks return ``{"rank": r, "rounds_served": n}``.
    """
    # (PrivacySpec itself refuses M*K > N: fewer users than one round needs.)
    if spec.population != train.num_users + audit_canaries:
        raise ValueError(
            f"spec.population ({spec.population}) must equal the number of training users "
            f"({train.num_users}) plus audit canaries ({audit_canaries}): the sampling rate depends on it"
        )
    check_server_schedule(fed_cfg, spec.rounds)  # the warmup must end before the last round
    if run_cfg.threads:
        torch.set_num_threads(run_cfg.threads)
    env, device, created_group = join_job(resolve_device(run_cfg.device))  # env None outside torchrun

    # --- the server model (for DP-FedAvg with the global head that is aggregated too)
    torch.manual_seed(run_cfg.seed)
    provenance = provenance or Provenance()
    model, ckpt_meta = build_model(model_cfg, train.image_shape, device=device, per_user_training=True,
                                   private_run=not spec.nonprivate,
                                   allow_nonprivate_init=provenance.allow_nonprivate_init)
    server_params, global_head = server_parameters(model, fed_cfg, train.num_classes, run_cfg.seed)
    trainer = client_trainer(model, train.num_classes, fed_cfg, run_cfg)
    data = ClientData.of(train, device)  # each client's rows read when it runs
    template = [torch.zeros(sum(p.numel() for p in server_params), device=device)]
    if env is not None and env.rank != 0:  # a worker: serve rank 0's rounds, hold no state
        worker = DistributedExecutor(trainer, data, ClientRandomness(), env, template, eval_ds.images)
        served = worker.serve()
        leave_distributed(created_group)
        return {"rank": env.rank, "rounds_served": served}

    run = RunDir(run_cfg.out)
    seeded = noise_seed is not None
    config = config_json(
        algorithm=fed_cfg.algorithm, model=model_cfg, federated=fed_cfg, privacy=spec, run=run_cfg,
        epsilon_budget=epsilon_budget, noise_seeded=seeded,
        **({"audit_canaries": audit_canaries} if audit_canaries else {}),
    )
    release = Release(run.path, algorithm=fed_cfg.algorithm, trainable=model_cfg.trainable, meta=ckpt_meta,
                      provenance=provenance, source=train.source, private_training=not spec.nonprivate,
                      loss=fed_cfg.loss)
    server_opt = make_server_optimizer(server_params, fed_cfg)  # post-processing (algorithms.server)
    # sampler, client keys, noise, adaptive clip and ledger, all from the spec (privacy.plan)
    plan = PrivacyPlan.build(spec, seed=noise_seed, efficient_tree=fed_cfg.efficient_tree)
    executor = (DistributedExecutor(trainer, data, plan.randomness, env, template) if env is not None
                else LocalExecutor(trainer, data, plan.randomness))
    # audit run: canary users clipped and noised with the real clients (training.audit_run)
    audit = AuditRun(audit_canaries, spec, train.num_users, server_params, resume=resume, release=audit_release,
                     seed=noise_seed + 3 if seeded else None, score=audit_score) if audit_canaries else None
    rnd = 0
    if resume_from_checkpoint(run, resume):
        rnd = load_state(run, config, spec, model, global_head, server_opt, plan, device)
    else:
        run.write_config(config)
        run.metrics.unlink(missing_ok=True)

    def evaluate() -> tuple[dict[str, Any], Any]:  # embedding shared by the ranks (one process: all here)
        emb = executor.embed(model, eval_ds.images, run_cfg.eval_batch_size)
        metrics, ver = evaluate_embeddings(emb, eval_ds.labels, max_pairs=run_cfg.eval_max_pairs)
        model.train()
        return metrics, ver

    def checkpoint() -> None:
        card = release.write(model, privacy_report(spec, plan.ledger, plan.seeded, plan.clip_state), rounds=rnd)  # released
        save_checkpoint(run.checkpoint, {  # private (0600)
            "provenance": card["provenance"], "model_card": card, "kind": fed_cfg.algorithm, **ckpt_meta,
            "backbone": model.state_dict(),
            "global_head": global_head.detach().cpu() if global_head is not None else None,
            "server_optimizer": server_opt.state_dict(), **plan.state_dict(), "round": rnd, "config": config,
            "privacy_fingerprint": spec.fingerprint(), "privacy_spec": to_dict(spec),
            "model_config": to_dict(model_cfg),
        })

    log = RoundLog(run, spec, plan.ledger, fed_cfg, run_cfg, evaluate, start_round=rnd)  # round 0 evaluated
    stopped_by_budget = False
    try:
        with GracefulStop() as stop:  # SIGTERM/SIGINT: finish the round, checkpoint, stop
            schedule = CheckpointSchedule(run_cfg.checkpoint_every, run_cfg.checkpoint_interval_s, stop)
            while rnd < spec.rounds:
                if epsilon_budget is not None and not spec.nonprivate and \
                        plan.ledger.epsilon_after(plan.ledger.rounds + 1, "rdp") > epsilon_budget:
                    stopped_by_budget = True
                    break
                t_round, t_collective = time.perf_counter(), executor.collective_seconds
                # 1. sample users into virtual clients (audit canaries leave the real clients' slots)
                slots = plan.sample_round()
                slots = audit.real_slots(slots) if audit is not None else slots
                # 2-3. every client trains from the current model; its delta is clipped into the sum
                start = parameters_to_vector(server_params).detach()
                acc, clip_used = plan.accumulator(template), plan.clip_norm
                tally = run_round(executor, rnd, start, slots, plan.keys(slots), acc, run)
                clipped = audit.contribute(acc) if audit is not None else acc.result()
                # 4. noise on the SUM, once (and adaptive clipping's noised count)
                noised = plan.release(clipped)[0]
                # 5. divide by the PUBLIC expected number of clients; server optimizer step
                set_server_lr(server_opt, server_lr_at(fed_cfg, rnd, spec.rounds))  # public: the round number
                server_step(server_params, server_opt, noised, plan.expected_clients)
                if audit is not None:  # per-round canary scores, from the released update only
                    audit.after_round(server_params)
                # 6. account
                plan.ledger.step()
                rnd += 1
                if not torch.isfinite(parameters_to_vector(server_params)).all():  # the released model: public
                    raise TrainingDiverged(divergence_message(spec, fed_cfg, rnd, run))
                # 7. record: private diagnostics; released epsilon and evaluation on held-out users
                is_eval = log.round_done(rnd, clipped, tally, seconds=time.perf_counter() - t_round,
                                         collective_seconds=executor.collective_seconds - t_collective,
                                         clip_used=clip_used if plan.clip_state is not None else None)
                if schedule.due(rnd, at_eval=is_eval):
                    checkpoint()
                if stop.requested:
                    log.close()
                schedule.raise_if_stopped("round", rnd, run.checkpoint)
    finally:
        executor.close()  # the other ranks stop serving (a no-op in one process)
        if executor.world_size > 1 and not executor.failed:  # the final evaluation, if any, runs here alone
            leave_distributed(created_group)
    log.close()
    if log.needs_final_evaluation(stopped_by_budget):
        log.record(rnd, evaluated=True, final=True)
        checkpoint()

    report = log.report(rnd, stopped_by_budget=stopped_by_budget,
                        privacy=release.privacy(privacy_report(spec, plan.ledger, plan.seeded, plan.clip_state)),
                        provenance=release.provenance, train_users=train.num_users,
                        train_examples=train.num_examples, train_identities=train.num_classes,
                        eval_identities=eval_ds.num_classes, processes=executor.world_size)
    if audit is not None:  # released: the audit summary only (canaries: private/)
        report["privacy"]["audit"] = audit.finish(server_params, report["privacy"], run.make_private_dir())
    run.write_report(report)
    release.write(model, report["privacy"], rounds=rnd)  # the final release artifact
    return report


def client_trainer(model: torch.nn.Module, num_classes: int, fed_cfg: FederatedConfig,
                   run_cfg: RunConfig) -> ClientTrainer | BatchedClientTrainer:
    """One client at a time, or ``run_cfg.client_batch`` at once (vmap); bf16 autocast on
    request. Performance only: the clients compute the same updates (to float rounding)."""
    perf = LocalPerformance(bf16=run_cfg.bf16)
    if run_cfg.client_batch == 1:
        return ClientTrainer(model, num_classes, fed_cfg, perf)
    return BatchedClientTrainer(model, num_classes, fed_cfg, run_cfg.client_batch, perf)


def server_parameters(model: torch.nn.Module, fed_cfg: FederatedConfig, num_classes: int,
                      seed: int) -> tuple[list[torch.nn.Parameter], torch.nn.Parameter | None]:
    """The parameters the server updates: the trainable backbone, and for DP-FedAvg a
    Glorot-initialised global head (returned separately too)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not fed_cfg.aggregates_head:
        return params, None
    device = params[0].device
    head = torch.nn.Parameter(torch.empty(num_classes, model.embedding_dim, device=device))
    glorot_(head, torch.Generator().manual_seed(seed))
    return params + [head], head


def run_round(executor: LocalExecutor, rnd: int, start: torch.Tensor, slots: list[np.ndarray],
              keys: list[tuple[int, int]], acc: Any, run: RunDir) -> Any:
    """``executor.run_round``; a lost rank becomes an error naming the intact checkpoint."""
    try:
        return executor.run_round(rnd, start, slots, keys, acc)
    except RankFailure as e:
        where = f"the last checkpoint, {run.checkpoint}, is intact" if run.checkpoint.exists() else \
            "no checkpoint was written yet"
        raise RankFailure(
            f"{e}. Training stopped at round {rnd + 1}; {where}. Resume with the same command and "
            "`--resume auto` (under `torchrun --max-restarts N` a restarted job does so by itself)."
        ) from e


def load_state(run: RunDir, config: str, spec: PrivacySpec, model: torch.nn.Module,
               global_head: torch.nn.Parameter | None, server_opt: torch.optim.Optimizer,
               plan: PrivacyPlan, device: torch.device) -> int:
    """Restore a checkpoint written under the same privacy spec and settings; its round."""
    state = load_checkpoint(run.checkpoint, map_location=device)
    if state.get("privacy_fingerprint") != spec.fingerprint():
        raise CheckpointError(
            f"{run.checkpoint} was trained under a different privacy spec ("
            + (describe_differences(state["config"], config) or "noise, clip norm, sampling, clients, "
               "rounds or delta differ")
            + "); resuming would make the reported epsilon wrong. Resume with the original privacy flags."
        )
    check_same_config(run, state.get("config"), config)
    model.load_state_dict(state["backbone"])
    if global_head is not None:
        with torch.no_grad():
            global_head.copy_(state["global_head"])
    server_opt.load_state_dict(state["server_optimizer"])
    plan.load_state_dict(state)
    rnd = int(state["round"])
    run.truncate_metrics_after("round", rnd)
    return rnd


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
                   clip_state: AdaptiveClipState | None = None) -> dict[str, Any]:
    """Every epsilon with its accountant, delta, unit and neighbouring relation."""
    out: dict[str, Any] = {"spec": to_dict(spec), "noise_seeded": seeded, "rounds_composed": ledger.rounds}
    if spec.adaptive_clipping is not None:
        out["adaptive_clipping"] = adaptive_clipping_report(spec, clip_state)
    if spec.nonprivate:
        out["statement"] = "not private (noise multiplier 0, explicitly requested)"
        return out
    out["noise_sampler"] = describe_sampler(spec.secure_noise, seeded)
    kw = dict(delta=spec.resolved_delta, unit=spec.unit, relation=spec.relation)
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
    for n in EXTRAPOLATE_TO:
        if n <= spec.population:
            continue
        ex = extrapolate(spent, n, "rdp")
        out["extrapolated"].append({
            "population": n, "factor": ex.factor, "noise_multiplier": ex.noise_multiplier,
            "clients_per_round": ex.clients_per_round, "epsilon_rdp": ex.epsilon,
            "delta": ex.delta, "delta_note": ex.delta_note,
            "statement": describe_epsilon(ex.epsilon, accountant="rdp", delta=ex.delta,
                                          unit=spec.unit, relation=spec.relation)
            + f" if {n:,} users took part with noise {spec.noise_multiplier:g} x {ex.factor:g} and "
              f"{ex.clients_per_round:,} clients per round (same noise on the average; {ex.delta_note})",
        })
    return out
