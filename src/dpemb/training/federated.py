"""User-level DP federated training: DP-FedEmb, DP-FedAvg, DP-FTRL-FedEmb.

``train_federated`` builds the run (model, clients, privacy plan, server state) and
``run_rounds`` is the loop, its seven steps numbered in its comments (the module of each:
docs/SCALE.md, "Where each step lives in the code"). An atomic checkpoint holds everything
needed to resume exactly, with the privacy spec's fingerprint (docs/PRIVACY.md, "The
checkpoint file").

Privacy guarantee: (epsilon, delta)-DP at the USER level for the released sequence
of models, under the neighbouring relation of ``spec.relation``, as computed by the
ledger for the rounds actually run.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch

from dpemb.algorithms.client import ClientTrainer, glorot_
from dpemb.algorithms.batched_client import BatchedClientTrainer
from dpemb.algorithms.config import FederatedConfig, LocalPerformance
from dpemb.algorithms.public_negatives import PublicNegatives
from dpemb.algorithms.round import ClientData
from dpemb.algorithms.server import check_server_schedule
from dpemb.data.dataset import UserDataset
from dpemb.data.tensors import resolve_device
from dpemb.privacy import PrivacySpec, check_epsilon_budget
from dpemb.privacy.client_keys import ClientRandomness
from dpemb.privacy.plan import PrivacyPlan
from dpemb.training.artifact import Release, held_out_evaluation
from dpemb.training.checkpoint import training_record
from dpemb.training.audit_run import AuditRun
from dpemb.training.config import ModelConfig, RunConfig, config_json
from dpemb.training.evaluate import evaluate_embeddings
from dpemb.training.executor import DistributedExecutor, LocalExecutor, RankFailure, join_job, leave_distributed
from dpemb.training.errors import TrainingDiverged
from dpemb.training.interrupt import CheckpointSchedule, GracefulStop, TrainingInterrupted
from dpemb.training.modelinit import build_model
from dpemb.training.provenance import Provenance, source_summary
from dpemb.training.round_log import EXTRAPOLATE_TO, RoundLog
from dpemb.training.rundir import RunDir
from dpemb.training.server_state import ServerState


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
    public: UserDataset | None = None,
    settings: dict[str, Any] | None = None,
    extrapolate_to: tuple[int, ...] = EXTRAPOLATE_TO,
    extrapolation_accountant: str = "rdp",
) -> dict[str, Any]:
    """Train with user-level DP; returns the report (also ``<out>/report.json``).
    ``settings``: the run's ``TrainConfig.to_dict()``, written as its config.json
    (``dpemb.training.runner``). ``extrapolate_to``: the populations (above the real one)
    whose extrapolated epsilon (``extrapolation_accountant``'s) the report and card state.
    ``public``: a PUBLIC dataset (no private user in it) whose identities become extra
    rows of every fresh head; required exactly when ``fed_cfg.public_negatives``
    (``dpemb.algorithms.public_negatives``: the guarantee is unchanged).
    ``provenance``: the data trained on (``Provenance``), recorded in the checkpoint and
    the release artifact. ``noise_seed`` None draws the noise and sampling seeds from the
    OS's secure source. ``audit_canaries`` n > 0: an AUDIT run with n canary users of
    ``spec.population`` = N + n (``AuditRun``), its audit in the report's privacy section,
    not for release unless ``audit_release``; ``audit_score``: "final" or "rounds". Under
    torchrun (``WORLD_SIZE`` > 1) rank 0 returns the report, the other ranks
    ``{"rank": r, "rounds_served": n}`` (``dpemb.training.executor``).
    """
    epsilon_budget = check_epsilon_budget(epsilon_budget, spec)  # a NaN budget would never stop the run
    if spec.population != train.num_users + audit_canaries:  # the sampling rate (epsilon) is of it
        raise ValueError(f"spec.population ({spec.population}) must equal the number of training "
                         f"users ({train.num_users}) plus audit canaries ({audit_canaries}): the "
                         "sampling rate depends on it")
    check_server_schedule(fed_cfg, spec.rounds)  # the warmup must end before the last round
    if run_cfg.threads:
        torch.set_num_threads(run_cfg.threads)
    env, device, created_group = join_job(resolve_device(run_cfg.device))  # env None outside torchrun

    # --- the server model (for DP-FedAvg with the global head that is aggregated too) and the clients
    torch.manual_seed(run_cfg.seed)
    provenance = provenance or Provenance()
    model, ckpt_meta = build_model(model_cfg, train.image_shape, device=device, per_user_training=True,
                                   private_run=not spec.nonprivate,
                                   allow_nonprivate_init=provenance.allow_nonprivate_init)
    params, global_head = [p for p in model.parameters() if p.requires_grad], None  # server-updated
    if fed_cfg.aggregates_head:  # DP-FedAvg: and a Glorot-initialised global head
        global_head = torch.nn.Parameter(torch.empty(train.num_classes, model.embedding_dim,
                                                     device=params[0].device))
        glorot_(global_head, torch.Generator().manual_seed(run_cfg.seed))
        params = params + [global_head]
    if fed_cfg.public_negatives != (public is not None):
        raise ValueError("--public-negatives needs a public dataset (give its folder)" if fed_cfg.public_negatives
                         else "a public dataset was given but public_negatives is off")
    if public is not None and public.image_shape != train.image_shape:
        raise ValueError(f"the public negatives' images are {public.image_shape}, the training images "
                         f"{train.image_shape}: prepare both at the same size and channels")
    negatives = PublicNegatives.of(public, device) if public is not None else None
    # one client at a time, or client_batch at once (vmap): the same updates (to float rounding)
    perf, batch = LocalPerformance(bf16=run_cfg.bf16), run_cfg.client_batch
    trainer = (ClientTrainer(model, train.num_classes, fed_cfg, perf, negatives) if batch == 1
               else BatchedClientTrainer(model, train.num_classes, fed_cfg, batch, perf, negatives))
    data = ClientData.of(train, device)
    template = [torch.zeros(sum(p.numel() for p in params), device=device)]
    if env is not None and env.rank != 0:  # a worker: serve rank 0's rounds, hold no state
        served = DistributedExecutor(trainer, data, ClientRandomness(), env, template, eval_ds.images).serve()
        leave_distributed(created_group)
        return {"rank": env.rank, "rounds_served": served}

    # --- rank 0: the run directory, the privacy plan (sampler, client keys, noise, adaptive
    # clip, ledger; privacy.plan), the release artifact, and the state a resume restores
    run = RunDir.open(run_cfg.out, resume=resume, overwrite=run_cfg.overwrite)
    seeded = noise_seed is not None
    data_record = training_record(train, ckpt_meta.pop("init_lineage"))  # PRIVATE: the checkpoint only
    config = config_json(algorithm=fed_cfg.algorithm, model=model_cfg, federated=fed_cfg, privacy=spec,
                         run=run_cfg, epsilon_budget=epsilon_budget, noise_seeded=seeded,
                         **({"audit_canaries": audit_canaries} if audit_canaries else {}))
    release = Release(run.path, algorithm=fed_cfg.algorithm, trainable=model_cfg.trainable, meta=ckpt_meta,
                      provenance=provenance, source=train.source, private_training=not spec.nonprivate,
                      loss=fed_cfg.loss, ema_decay=fed_cfg.server_ema)
    plan = PrivacyPlan.build(spec, seed=noise_seed, efficient_tree=fed_cfg.efficient_tree)
    config_file = json.dumps(settings, indent=2, sort_keys=True) if settings is not None else None
    server = ServerState.open(model, params, global_head, plan, fed_cfg, model_cfg, run, release, config,
                              ckpt_meta, resume, device, data_record, config_file)
    server.extrapolate_to, server.extrapolation_accountant = tuple(extrapolate_to), extrapolation_accountant
    executor = (DistributedExecutor(trainer, data, plan.randomness, env, template) if env is not None
                else LocalExecutor(trainer, data, plan.randomness))
    # audit run: canary users clipped and noised with the real clients (training.audit_run)
    audit = AuditRun(audit_canaries, spec, train.num_users, params, resume=resume, release=audit_release,
                     seed=noise_seed + 3 if seeded else None, score=audit_score) if audit_canaries else None

    def evaluate() -> tuple[dict[str, Any], Any]:  # embedding shared by the ranks (one process: all here)
        with server.released_weights():  # the model that is released (server_ema: the average)
            emb = executor.embed(model, eval_ds.images, run_cfg.eval_batch_size)
        metrics, ver = evaluate_embeddings(emb, eval_ds.labels, max_pairs=run_cfg.eval_max_pairs)
        model.train()
        return metrics, ver

    log = RoundLog(run, spec, plan.ledger, fed_cfg, run_cfg, evaluate, start_round=server.round)  # round 0
    try:
        try:
            stopped_by_budget = run_rounds(server, executor, template, log, audit, run_cfg, epsilon_budget)
        finally:
            executor.close()  # the other ranks stop serving (a no-op in one process)
            if executor.world_size > 1 and not executor.failed:  # the final evaluation, if any, runs here alone
                leave_distributed(created_group)
    except (TrainingInterrupted, TrainingDiverged) as stop:  # the release in the run directory is incomplete
        log.close()
        run.write_report(log.incomplete_report(server.released_round, reason=str(stop),
                                               privacy=release.privacy(server.privacy()),
                                               provenance=release.provenance))
        raise
    log.close()
    if log.needs_final_evaluation(stopped_by_budget):
        log.record(server.round, evaluated=True, final=True)
        server.checkpoint()
    report = log.report(server.round, stopped_by_budget=stopped_by_budget, privacy=release.privacy(server.privacy()),
                        provenance=release.provenance, train=train, eval_ds=eval_ds,
                        processes=executor.world_size)
    if public is not None:  # public input: where the heads' extra rows came from
        report["public_negatives"] = {"source": source_summary(public.source), "identities": negatives.num_identities,
                                      "images": public.num_examples}
    if audit is not None:  # released: the audit summary only (canaries: private/)
        report["privacy"]["audit"] = audit.finish(params, report["privacy"], run.make_private_dir())
    run.write_report(report)
    with server.released_weights():
        release.write(model, report["privacy"], held_out_evaluation(report), rounds=server.round,
                      planned_rounds=server.round if stopped_by_budget else spec.rounds)  # the final release artifact
    return report


def run_rounds(server: ServerState, executor: LocalExecutor, template: list[torch.Tensor], log: RoundLog,
               audit: AuditRun | None, run_cfg: RunConfig, epsilon_budget: float | None) -> bool:
    """The training loop: rounds until ``spec.rounds``, a signal (SIGTERM/SIGINT: the round
    finishes, a checkpoint is written, ``TrainingInterrupted`` is raised) or, with
    ``epsilon_budget``, the round that would spend more; returns whether the budget
    stopped it. Privacy: each round's only release is the noised sum (step 4) and the
    ledger composes it (step 5); everything after is post-processing."""
    plan, spec = server.plan, server.spec
    with GracefulStop() as stop:
        schedule = CheckpointSchedule(run_cfg.checkpoint_every, run_cfg.checkpoint_interval_s, stop)
        while server.round < spec.rounds:
            if epsilon_budget is not None and not spec.nonprivate and \
                    plan.ledger.epsilon_after(plan.ledger.rounds + 1, "rdp") > epsilon_budget:
                return True
            rnd, t_round, t_collective = server.round, time.perf_counter(), executor.collective_seconds
            # 1. sample users into virtual clients (audit canaries leave the real clients' slots)
            slots = plan.sample_round()
            slots = audit.real_slots(slots) if audit is not None else slots
            # 2-3. every client trains from the current model; its delta is clipped into the sum
            acc, clip_used = plan.accumulator(template), plan.clip_norm
            tally = run_round(executor, rnd, server.vector(), slots, plan.keys(slots), acc, server.run)
            clipped = audit.contribute(acc) if audit is not None else acc.result()
            # 4. noise on the SUM, once (and adaptive clipping's noised count)
            noised = plan.release(clipped)[0]
            # 5. account
            plan.ledger.step()
            # 6. divide by the PUBLIC expected number of clients; server optimizer step
            server.step(noised)
            if audit is not None:  # per-round canary scores, from the released update only
                audit.after_round(server.params)
            # 7. record: private diagnostics; released epsilon and evaluation on held-out users
            is_eval = log.round_done(server.round, clipped, tally, seconds=time.perf_counter() - t_round,
                                     collective_seconds=executor.collective_seconds - t_collective,
                                     client_seconds=executor.client_seconds,
                                     clip_used=clip_used if plan.clip_state is not None else None,
                                     norm_ratio=server.norm_ratio)
            if schedule.due(server.round, at_eval=is_eval):
                server.checkpoint()
            if stop.requested:
                log.close()
            schedule.raise_if_stopped("round", server.round, server.run.checkpoint)
    return False


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
