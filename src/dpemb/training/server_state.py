"""What the server (rank 0) of a federated run holds between rounds, and how it is
saved, restored and released.

``checkpoint`` writes the release artifact (the model and its model card: only what the
guarantee covers) and the private checkpoint (0600: generator and sampler states,
optimizer, ledger) atomically; ``ServerState.open`` resumes from that checkpoint only
under the same privacy spec, so the ledger's epsilon stays the epsilon of the whole run.

With ``server_ema`` > 0 the evaluated and released model is the moving average of the
server models (``released_weights``; the clients start from the server model), a
function of the released noised updates only: post-processing, the same guarantee.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.nn.utils import parameters_to_vector

from dpemb.algorithms.client import load_flat_
from dpemb.algorithms.config import FederatedConfig
from dpemb.algorithms.round import server_step
from dpemb.algorithms.server import make_server_optimizer, server_lr_at, set_server_lr
from dpemb.privacy import PrivacySpec
from dpemb.privacy.plan import PrivacyPlan
from dpemb.training.artifact import Release
from dpemb.training.config import ModelConfig, describe_differences, to_dict
from dpemb.training.errors import TrainingDiverged
from dpemb.training.round_log import EXTRAPOLATE_TO, privacy_report
from dpemb.training.checkpoint import (CheckpointError, check_same_config, check_same_data,
                                       load_checkpoint, more_rounds_refusal, resume_from_checkpoint,
                                       save_checkpoint)
from dpemb.training.rundir import RunDir


@dataclass
class ServerState:
    """The server model, its optimizer, the privacy plan and the round; see the module."""

    model: torch.nn.Module
    params: list[torch.nn.Parameter]  # what the server updates (backbone; + global head)
    global_head: torch.nn.Parameter | None  # DP-FedAvg only
    optimizer: torch.optim.Optimizer
    plan: PrivacyPlan
    fed_cfg: FederatedConfig
    model_cfg: ModelConfig
    run: RunDir
    release: Release
    config: str  # the run's settings as JSON (config.json, and the checkpoint's check)
    ckpt_meta: dict[str, Any]
    data_record: dict[str, Any]  # PRIVATE: the training data's fingerprints (training.checkpoint)
    round: int = 0
    ema: torch.Tensor | None = None  # server_ema > 0: the moving average of the server models (flat)
    initial_norm: float = 0.0  # L2 norm of the model the run started from (public: the init)
    norm_ratio: float = 1.0  # the server model's norm / initial_norm after the last step (public)
    released_round: int | None = None  # the round of the release artifact in the run directory (None: none yet)
    extrapolate_to: tuple[int, ...] = EXTRAPOLATE_TO  # populations the privacy section extrapolates to
    extrapolation_accountant: str = "rdp"

    @property
    def spec(self) -> PrivacySpec:
        """The privacy spec the plan was built from (one copy: the plan's)."""
        return self.plan.spec

    @classmethod
    def open(cls, model: torch.nn.Module, params: list[torch.nn.Parameter],
             global_head: torch.nn.Parameter | None, plan: PrivacyPlan, fed_cfg: FederatedConfig, model_cfg: ModelConfig, run: RunDir, release: Release,
             config: str, ckpt_meta: dict[str, Any], resume: bool | str, device: torch.device,
             data_record: dict[str, Any], config_file: str | None = None) -> ServerState:
        """A fresh run (``RunDir.start_fresh``, writing ``config_file``, the run's
        ``TrainConfig``, as its config.json; ``config`` where none is given) or, when
        ``resume`` finds a checkpoint, the state it holds."""
        state = cls(model, params, global_head, make_server_optimizer(params, fed_cfg), plan, fed_cfg,
                    model_cfg, run, release, config, ckpt_meta, data_record)
        if fed_cfg.server_ema:  # the average starts at the (public or random) initial model
            state.ema = state.vector().clone()
        state.initial_norm = float(state.vector().norm())  # the initial model's (public or random)
        if resume_from_checkpoint(run, resume):
            state.load(device)
            if config_file is not None:
                run.write_config(config_file)
        else:
            run.start_fresh(config_file or config)
        return state

    def vector(self) -> torch.Tensor:
        """The server parameters as one flat vector (the clients' start)."""
        return parameters_to_vector(self.params).detach()

    def step(self, noised_sum: torch.Tensor) -> None:
        """Divide the noised SUM by the PUBLIC expected number of clients and take the
        server optimizer's step at this round's (public) learning rate; then count the
        round. Post-processing of the released sum: no privacy cost."""
        set_server_lr(self.optimizer, server_lr_at(self.fed_cfg, self.round, self.spec.rounds))
        server_step(self.params, self.optimizer, noised_sum, self.plan.expected_clients)
        self.round += 1
        model = self.vector()
        if not torch.isfinite(model).all():  # the released model: public
            raise TrainingDiverged(self.divergence_message(
                "the model has non-finite weights after the server step"))
        self.norm_ratio = float(model.norm()) / max(self.initial_norm, 1e-12)
        limit = self.fed_cfg.divergence_norm_ratio
        if limit and self.norm_ratio > limit:
            raise TrainingDiverged(self.divergence_message(
                f"the model's norm grew to {self.norm_ratio:.3g} x its initial norm (the limit is {limit:g} x, "
                "--divergence-norm-ratio; 0 turns the test off)"))
        if self.ema is not None:  # ema <- d ema + (1 - d) model
            self.ema.lerp_(model, 1.0 - self.fed_cfg.server_ema)

    @contextmanager
    def released_weights(self) -> Iterator[None]:
        """Inside: the server parameters hold the model that is released (the moving
        average with ``server_ema``, else the server model itself); restored on exit."""
        if self.ema is None:
            yield
            return
        current = self.vector().clone()
        load_flat_(self.params, self.ema)  # copies: the parameters never alias the average
        try:
            yield
        finally:
            load_flat_(self.params, current)

    def privacy(self) -> dict[str, Any]:
        """The privacy section of the report and model card (public quantities only)."""
        return privacy_report(self.spec, self.plan.ledger, self.plan.seeded, self.plan.clip_state,
                              extrapolate_to=self.extrapolate_to, accountant=self.extrapolation_accountant)

    def checkpoint(self) -> None:
        """Release artifact and private checkpoint, both atomically."""
        with self.released_weights():
            card = self.release.write(self.model, self.privacy(), rounds=self.round,
                                      planned_rounds=self.spec.rounds)  # released
        self.released_round = self.round
        save_checkpoint(self.run.checkpoint, {  # private (0600)
            "provenance": card["provenance"], "model_card": card, "kind": self.fed_cfg.algorithm, **self.ckpt_meta,
            "backbone": self.model.state_dict(),
            "global_head": self.global_head.detach().cpu() if self.global_head is not None else None,
            "server_optimizer": self.optimizer.state_dict(), **self.plan.state_dict(), "round": self.round,
            "server_ema": self.ema.cpu() if self.ema is not None else None,
            "config": self.config, "privacy_fingerprint": self.spec.fingerprint(),
            "privacy_spec": to_dict(self.spec), "model_config": to_dict(self.model_cfg), **self.data_record,
        })

    def load(self, device: torch.device) -> None:
        """Restore the checkpoint; refused when it was written under another privacy spec
        (the epsilon would be wrong) or other settings."""
        run, state = self.run, load_checkpoint(self.run.checkpoint, map_location=device)
        if state.get("privacy_fingerprint") != self.spec.fingerprint():
            more = more_rounds_refusal(run, state.get("config"), self.config, state.get("privacy_spec"),
                                       int(state["round"]), self.spec)
            if more is not None:
                raise CheckpointError(more)
            raise CheckpointError(
                f"{run.checkpoint} was trained under a different privacy spec ("
                + (describe_differences(state["config"], self.config) or "noise, clip norm, sampling, clients, "
                   "rounds or delta differ")
                + "); resuming would make the reported epsilon wrong. Resume with the original privacy flags."
            )
        check_same_config(run, state.get("config"), self.config)
        check_same_data(run, state.get("data_fingerprint"), self.data_record["data_fingerprint"])
        self.model.load_state_dict(state["backbone"])
        if self.global_head is not None:
            with torch.no_grad():
                self.global_head.copy_(state["global_head"])
        self.optimizer.load_state_dict(state["server_optimizer"])
        if self.ema is not None:  # the same config, so the checkpoint holds it
            self.ema.copy_(state["server_ema"])
        self.plan.load_state_dict(state)
        self.round = self.released_round = int(state["round"])
        run.truncate_metrics_after("round", self.round)
        print(f"resuming {run.path} from its checkpoint at round {self.round} of {self.spec.rounds}", flush=True)

    def divergence_message(self, what: str) -> str:
        """Which round, the likely cause and what to do, from public quantities only
        (``what``: the test on the released model that failed)."""
        spec, cfg = self.spec, self.fed_cfg
        per_coord = spec.value_noise_multiplier * spec.sensitivity / spec.clients_per_round
        return (
            f"training diverged at round {self.round}: {what}, "
            f"so training stopped (the last checkpoint in {self.run.path} is intact). The likely cause is the "
            f"noise on the average update: z x sensitivity / M = {spec.value_noise_multiplier:.3g} x "
            f"{spec.sensitivity:.3g} / {spec.clients_per_round} = {per_coord:.2e} per coordinate, applied with "
            f"server lr {cfg.server_lr:g}. What to do: more clients per round (--clients-per-round; at a fixed "
            "epsilon the noise on the average falls with M), a larger population or a larger --target-epsilon, "
            "a lower --server-lr, or a smaller --clip-norm. `dpemb account` shows the noise a cohort implies."
        )
