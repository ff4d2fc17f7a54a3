"""Centralized (non-private) training: the paper's centralized baseline (the loop, step by
step: docs/MODELS.md, "centralized").

This run is not private. Its report says so wherever epsilon would be.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import numpy as np
import torch
from dpemb.data.dataset import UserDataset
from dpemb.models.margin import head_loss
from dpemb.data.tensors import numpy_to_tensor, resolve_device
from dpemb.progress import progress
from dpemb.training.interrupt import CheckpointSchedule, GracefulStop
from dpemb.training.checkpoint import (check_same_config, check_same_data, load_checkpoint,
                                       resume_from_checkpoint, save_checkpoint, training_record)
from dpemb.training.config import ModelConfig, OptimConfig, RunConfig, config_json, to_dict
from dpemb.training.evaluate import evaluate_backbone
from dpemb.training.modelinit import build_model
from dpemb.training.artifact import Release, held_out_evaluation
from dpemb.training.provenance import Provenance
from dpemb.training.round_log import METRIC_PREFIXES, plot_training
from dpemb.training.rundir import RunDir
from dpemb.metrics import plot_roc

#: the privacy statement of every output of centralized training (no clipping, no noise)
CENTRALIZED_STATEMENT = "not private (centralized non-private training; epsilon = inf)"


class BatchOrder:
    """Shuffled epochs over ``n`` examples; its whole state is (rng state, perm, pos)."""

    def __init__(self, n: int, seed: int):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.perm = self.rng.permutation(n)
        self.pos = 0

    def next(self, batch_size: int) -> np.ndarray:
        out = []
        while batch_size > 0:
            if self.pos == self.n:
                self.perm, self.pos = self.rng.permutation(self.n), 0
            take = min(batch_size, self.n - self.pos)
            out.append(self.perm[self.pos : self.pos + take])
            self.pos += take
            batch_size -= take
        return np.concatenate(out)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "perm": self.perm.copy(), "pos": self.pos}

    def load_state_dict(self, s: dict[str, Any]) -> None:
        self.rng.bit_generator.state = s["rng"]
        self.perm, self.pos = np.asarray(s["perm"]), int(s["pos"])


def train_centralized(
    train: UserDataset,
    eval_ds: UserDataset,
    model_cfg: ModelConfig,
    optim_cfg: OptimConfig,
    run_cfg: RunConfig,
    *,
    resume: bool = False,
    provenance: Provenance | None = None,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train; returns the report (also written to ``<out>/report.json``). ``settings``:
    the run's ``TrainConfig.to_dict()``, written as its config.json (``dpemb.training.runner``).
    ``provenance``: the dataset and split trained on, recorded (with "trained without
    DP") in the checkpoint and the release artifact, so that a DP run started from
    this model can tell whether it saw private users."""
    if train.num_examples == 0:
        raise ValueError("the training split has no examples")
    if run_cfg.threads:
        torch.set_num_threads(run_cfg.threads)
    device = resolve_device(run_cfg.device)
    run = RunDir.open(run_cfg.out, resume=resume, overwrite=run_cfg.overwrite)
    config = config_json(algorithm="centralized", privacy=CENTRALIZED_STATEMENT, model=model_cfg, optim=optim_cfg, run=run_cfg)

    # --- model, head, optimizer
    torch.manual_seed(run_cfg.seed)
    model, ckpt_meta = build_model(model_cfg, train.image_shape, device=device)
    data_record = training_record(train, ckpt_meta.pop("init_lineage"))  # PRIVATE: the checkpoint only
    release = Release(run.path, algorithm="centralized", trainable=model_cfg.trainable, meta=ckpt_meta,
                      provenance=provenance, source=train.source, private_training=False,
                      loss=optim_cfg.loss)
    head = torch.nn.Linear(model.embedding_dim, train.num_classes, bias=False).to(device)
    torch.nn.init.xavier_uniform_(head.weight)
    params = [p for p in model.parameters() if p.requires_grad] + list(head.parameters())
    opt = torch.optim.SGD(
        params, lr=optim_cfg.lr, momentum=optim_cfg.momentum, weight_decay=optim_cfg.weight_decay
    )
    total = optim_cfg.steps
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, (lambda s: 0.5 * (1 + math.cos(math.pi * s / total))) if optim_cfg.cosine else (lambda s: 1.0)
    )

    # --- data: each batch's rows read from the training split as uint8 (a memory-mapped
    # dataset's split is a RowView: only the batch's rows are read, never the whole split)
    # and converted on the fly
    images = train.images
    labels = numpy_to_tensor(train.labels.astype(np.int64))
    order = BatchOrder(train.num_examples, run_cfg.seed)

    step, loss_ema = 0, None
    config_file = json.dumps(settings, indent=2, sort_keys=True) if settings is not None else config
    if resume_from_checkpoint(run, resume):
        state = load_checkpoint(run.checkpoint, map_location=device)
        check_same_config(run, state.get("config"), config)
        check_same_data(run, state.get("data_fingerprint"), data_record["data_fingerprint"])
        model.load_state_dict(state["backbone"])
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        order.load_state_dict(state["batch_order"])
        torch.set_rng_state(state["torch_rng"].cpu())  # loaded onto `device` with the rest
        if device.type == "cuda" and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"].cpu(), device)
        step, loss_ema = int(state["step"]), state["loss_ema"]
        run.truncate_metrics_after("step", step)
        print(f"resuming {run.path} from its checkpoint at step {step} of {optim_cfg.steps}", flush=True)
        run.write_config(config_file)
    else:
        run.start_fresh(config_file)  # config.json: the run's TrainConfig (a valid --config), written once

    def score() -> tuple[dict[str, Any], Any]:
        metrics, ver = evaluate_backbone(model, eval_ds, batch_size=run_cfg.eval_batch_size,
                                         max_pairs=run_cfg.eval_max_pairs, device=device)
        model.train()
        return metrics, ver

    def evaluate(step: int, loss: float | None) -> dict[str, Any]:
        metrics, ver = score()
        rec = {"step": step, "train_loss": loss, "epsilon": CENTRALIZED_STATEMENT, **metrics}
        run.append_metrics(rec)
        return rec | {"_roc": ver}

    def checkpoint(step: int, loss_ema: float | None) -> None:
        card = release.write(model, CENTRALIZED_STATEMENT, steps=step, planned_steps=optim_cfg.steps)  # released
        save_checkpoint(
            run.checkpoint,  # private (0600)
            {
                "provenance": card["provenance"],
                "model_card": card,
                "kind": "centralized",
                **ckpt_meta,
                "backbone": model.state_dict(),
                "head": head.state_dict(),
                "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "batch_order": order.state_dict(),
                "torch_rng": torch.get_rng_state(),
                **({"cuda_rng": torch.cuda.get_rng_state(device)} if device.type == "cuda" else {}),
                "step": step,
                "loss_ema": loss_ema,
                "config": config,
                "model_config": to_dict(model_cfg),
                "num_classes": train.num_classes,
                **data_record,
            },
        )

    about = {"algorithm": "centralized", "privacy": CENTRALIZED_STATEMENT,  # in every report
             "provenance": release.provenance, "eval_split": run_cfg.eval_split}
    first = evaluate(0, None) if step == 0 else None  # step 0 = the initialisation's score
    last_eval = first
    model.train()
    t0, seen = time.perf_counter(), 0
    bar = progress(total=total, initial=step, desc="centralized", enabled=run_cfg.progress, unit="step")
    with GracefulStop() as stop:  # SIGTERM/SIGINT: finish the step, checkpoint, stop
        schedule = CheckpointSchedule(run_cfg.checkpoint_every, run_cfg.checkpoint_interval_s, stop)
        while step < total:
            idx = order.next(optim_cfg.batch_size)
            batch = numpy_to_tensor(images[idx]).permute(0, 3, 1, 2).contiguous()  # uint8 NCHW
            x = batch.to(device, non_blocking=True).float().div_(255.0)
            y = labels[torch.from_numpy(idx)].to(device)
            loss = head_loss(model(x), head.weight, y, optim_cfg.loss)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            seen += len(idx)
            loss_ema = loss.item() if loss_ema is None else 0.98 * loss_ema + 0.02 * loss.item()
            bar.set_postfix(loss=f"{loss_ema:.3f}", refresh=False)  # drawn with the next update
            is_eval = step % run_cfg.eval_every == 0 or step == total
            if is_eval:
                last_eval = evaluate(step, loss_ema)
                bar.set_postfix(loss=f"{loss_ema:.3f}", r1e3=f"{last_eval['recall_at_far_0.001']:.3f}",
                                refresh=False)
            if schedule.due(step, at_eval=is_eval):
                checkpoint(step, loss_ema)
            bar.update(1)
            if stop.requested:  # the release in the run directory is this step's: say it is incomplete
                bar.close()
                run.write_report({
                    **about, "status": f"incomplete: stopped at step {step} of {total}",
                    "stopped_because": f"stopped by {stop.name}", "steps": step, "planned_steps": total,
                    "last_evaluated": {k: v for k, v in (last_eval or {}).items() if k != "_roc"}})
            schedule.raise_if_stopped("step", step, run.checkpoint)
    bar.close()
    elapsed = time.perf_counter() - t0

    records = run.read_metrics()
    if last_eval is None:  # resumed a run that had already finished: re-score, do not log
        metrics, ver = score()
        last_eval = {"step": step, **metrics, "_roc": ver}
    roc = last_eval.pop("_roc")
    plot_roc({"trained": roc}, run.path / "roc.png", title=f"ROC on the {run_cfg.eval_split} split (centralized, not private)")
    plot_training(records, run.path / "training.png", x="step")
    report = {
        **about,
        "status": "complete",
        "loss": to_dict(optim_cfg.loss),
        "steps": step,
        "train_examples": train.num_examples,
        "train_identities": train.num_classes,
        "eval_examples": eval_ds.num_examples,
        "eval_identities": eval_ds.num_classes,
        "initial": {k: v for k, v in records[0].items() if k.startswith(METRIC_PREFIXES)}
        if records and records[0]["step"] == 0 else None,
        "final": {k: v for k, v in last_eval.items() if k != "_roc"},
        "images_per_second": seen / elapsed if elapsed > 0 and seen else None,
    }
    run.write_report(report)
    release.write(model, CENTRALIZED_STATEMENT, held_out_evaluation(report), steps=step,
                  planned_steps=optim_cfg.steps)  # the final release artifact
    return report
