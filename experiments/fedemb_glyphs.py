#!/usr/bin/env python
"""DP-FedEmb vs DP-FedAvg vs DP-FTRL-FedEmb on the glyph benchmark, both regimes.

One command runs the whole experiment and writes ``docs/RESULTS_FEDEMB.md`` and PNG
plots in ``docs/img/``:

    .venv/bin/python experiments/fedemb_glyphs.py            # full (< 60 min, 2 cores)
    .venv/bin/python experiments/fedemb_glyphs.py --quick    # smoke test (a few minutes)

Every finished run is stored in ``<work>/results.json`` and reused on re-run, so a
crash or a time-out loses nothing: run the same command again to resume.

Setup (face-like regime needs thousands of identities, i.e. CJK fonts):

    make cjk-fonts    # apt-get install fonts-wqy-zenhei fonts-unfonts-core

(without root rights it extracts the packages into ``~/.cache/dpemb/debroot`` and links
the fonts into ``~/.local/share/fonts``; ``--font-dir DIR`` adds any other font folder).

Privacy conventions (stated again in the results): user-level (epsilon, delta)-DP,
add/remove-one-user relation (Gaussian, Poisson sampling; sensitivity C for K = 1
and 2C for K > 1) or replace-special (tree aggregation, epoch sampling), RDP
accountant. "Equal epsilon" means: for every configuration (K, M, mechanism, rounds)
the noise multiplier is calibrated (``calibrate_noise_multiplier``) so that the run,
EXTRAPOLATED to 1M users by the paper's convention (``extrapolate``: noise multiplier
and clients per round scaled by k = 1M / N, so the noise on the averaged update and
the sampling rate stay the same; delta = 1/1M), has the target epsilon. The epsilon
at the simulated population is reported too (it is astronomically large: the noise
that training survives at a few thousand users buys no privacy at that size).

Selection protocol: every regime's data has four disjoint user groups (public,
private training, validation, test) and three disjoint identity groups (training,
validation, test). The tuning grid is scored on the VALIDATION split (validation
users' examples of validation identities); every number in the result tables comes
from the TEST split (test users' examples of test identities), which no choice looks
at.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import replace
from multiprocessing import active_children, get_context
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CAL_POP = 1_000_000  # equal-epsilon calibration population (extrapolated)
EXTRA_POPS = (1_000_000, 10_000_000)
APT_LINE = "apt-get install fonts-wqy-zenhei fonts-unfonts-core"  # what `make cjk-fonts` runs
METRIC = "recall_at_far_0.001"

# ----------------------------------------------------------------------------- settings


def regimes(quick: bool) -> dict[str, dict[str, Any]]:
    """The two benchmark regimes and their fixed training settings."""
    s = 0.25 if quick else 1.0
    return {
        "face": dict(
            title="face-like (each identity owned by one user)",
            glyph=dict(regime="owned", num_users=int(6000 * s), identities_per_user=1,
                       images_per_identity=8, eval_identity_fraction=0.05,
                       validation_identity_fraction=0.05,
                       public_user_fraction=0.15, occlusion=0.3, seed=0),
            min_identities=int(6000 * s),
            eval_cap=2000 if not quick else 600,
            rounds=40 if quick else 200,
            max_examples=None,
            central_steps=150 if quick else 1000,
            pretrain_steps=150 if quick else 600,
        ),
        "hand": dict(
            title="handwriting-like (identities shared by all users)",
            # 20% test and 10% validation characters, each written by its own 5% of
            # the writers (who write only those characters): 70% of the characters
            # and 90% of the writers are left for training
            glyph=dict(regime="shared", num_users=int(2000 * s), identities_per_user=40,
                       images_per_identity=2, eval_identity_fraction=0.2,
                       validation_identity_fraction=0.1, eval_user_fraction=0.05,
                       validation_user_fraction=0.05, public_user_fraction=0.1, seed=0),
            min_identities=500,
            eval_cap=2000 if not quick else 600,
            rounds=30 if quick else 150,
            max_examples=64,  # Nmax: 2 local steps of 32 per virtual client and round
            central_steps=150 if quick else 1000,
            pretrain_steps=150 if quick else 600,
        ),
    }


BASE_FED = dict(local_epochs=1, local_batch_size=32, client_lr=0.05, server_lr=1.0,
                server_momentum=0.9)
CLIP = 0.3
CENTRAL_BATCH = 128  # batch of centralized training and public pretraining (a step budget counts them)
WIDTH_MAIN, WIDTH_BIG, EMB = 0.25, 1.0, 128
EPSILONS = (2.0, 0.5, 0.2, 0.1, 0.05)  # at 1M users (extrapolated), RDP
TUNE_EPS = 0.5
# the tuning grid: the SAME number of runs (3) per algorithm, at K = 4, eps TUNE_EPS, pretrained
GRID = {
    "dp-fedavg": [dict(server_lr=0.5), dict(server_lr=0.5, local_batch_size=8), dict(),
                  dict(server_lr=0.5, client_lr=0.1), dict(server_lr=0.5, client_lr=0.1, local_batch_size=8)],
    # head_init is explicit: "glorot" is the reference's fresh head, "zeros" passes no gradient to
    # the backbone until the head has taken a step (see the findings)
    "dp-fedemb": [dict(head_init="zeros", head_lr_scale=10.0, server_lr=0.5),
                  dict(head_init="zeros", head_lr_scale=3.0, server_lr=0.5, local_batch_size=8),
                  dict(head_init="zeros", head_lr_scale=1.0, server_lr=0.5, local_batch_size=8),
                  dict(head_init="zeros", head_lr_scale=3.0, server_lr=0.5, local_batch_size=8, client_lr=0.1),
                  dict(head_init="glorot", head_lr_scale=10.0, server_lr=0.5)],
}


# ----------------------------------------------------------------------------- data


def build_data(work: Path, name: str, reg: dict[str, Any], font_dirs: list[str]) -> dict[str, Any]:
    """Make (or reuse) the train / public / validation / eval (= test) splits of one
    regime on disk. No user and no identity is in two of train, validation and test."""
    from dpemb.data.dataset import UserDataset
    from dpemb.data.glyphs import GlyphConfig, make_glyphs

    d = work / "data" / name
    info_path = d / "info.json"
    if info_path.exists():
        return json.loads(info_path.read_text())
    cfg = GlyphConfig(**reg["glyph"], extra_font_paths=tuple(font_dirs))
    try:
        ds = make_glyphs(cfg, progress=False)
    except ValueError as e:
        sys.exit(f"cannot build the {name} benchmark: {e}\nInstall the CJK fonts: make cjk-fonts ({APT_LINE})"
                 " (or pass --font-dir with the extracted .deb contents)")
    if ds.source.get("pool_size", 0) < reg["min_identities"]:
        sys.exit(f"the identity pool has {ds.source.get('pool_size')} identities, the {name} regime "
                 f"needs {reg['min_identities']}: make cjk-fonts ({APT_LINE})")
    sp = ds.split()
    rng = np.random.default_rng(0)

    def capped(part: Any) -> Any:
        if part.num_examples <= reg["eval_cap"]:
            return part
        keep = np.zeros(part.num_examples, dtype=bool)
        keep[rng.choice(part.num_examples, reg["eval_cap"], replace=False)] = True
        return part.select(keep, relabel=True)

    parts = {"train": sp.train, "public": sp.public, "validation": capped(sp.validation),
             "eval": capped(sp.test)}
    for k, v in parts.items():
        v.save(d / k)
    info = {k: {"users": v.num_users, "examples": v.num_examples, "identities": v.num_classes}
            for k, v in parts.items()}
    info["pool_size"] = ds.source.get("pool_size")
    info["fonts"] = len(ds.source.get("fonts", []))
    info["glyph_config"] = cfg.to_dict()
    info_path.write_text(json.dumps(info, indent=1))
    return info


# ----------------------------------------------------------------------------- privacy


def make_spec(n_users: int, fed: dict[str, Any], rounds: int) -> Any:
    from dpemb.privacy.accounting import PrivacySpec

    mech = "tree" if fed["algorithm"] == "dp-ftrl-fedemb" else "gaussian"
    return PrivacySpec(population=n_users, clients_per_round=fed["M"], users_per_client=fed["K"],
                       noise_multiplier=1.0, clip_norm=CLIP, rounds=rounds, mechanism=mech)


def calibrate(spec: Any, eps: float, population: int = CAL_POP) -> float:
    """Simulation noise multiplier z such that the run extrapolated to ``population``
    users (default CAL_POP; z and M scaled by k) has epsilon ``eps`` (RDP, delta = 1/N')."""
    from dpemb.privacy.accounting import calibrate_noise_multiplier, extrapolate

    ex = extrapolate(spec, population, "rdp")
    z_big = calibrate_noise_multiplier(ex.spec, eps, "rdp")
    return z_big / ex.factor


def privacy_numbers(spec: Any) -> dict[str, Any]:
    """Epsilon of the simulated run and of its extrapolations (RDP), the noise."""
    from dpemb.privacy.accounting import epsilon_for, extrapolate

    if spec.nonprivate:
        return {"eps_sim": math.inf, **{f"eps_{n}": math.inf for n in EXTRA_POPS},
                "noise_on_average": 0.0, "z": 0.0}
    out = {"eps_sim": epsilon_for(spec, "rdp"), "z": spec.noise_multiplier,
           "noise_on_average": spec.noise_on_average, "delta_sim": spec.resolved_delta}
    for n in EXTRA_POPS:
        ex = extrapolate(spec, n, "rdp")
        out[f"eps_{n}"] = ex.epsilon
        out[f"z_{n}"] = ex.noise_multiplier
        out[f"M_{n}"] = ex.clients_per_round
    return out


def job_spec(job: dict[str, Any], n_users: int) -> Any:
    """The privacy spec a federated job trains under over ``n_users`` training users: its
    ``z``, or no noise, or the z calibrated for ``eps`` at its population, with its clip
    norm and adaptive clipping."""
    spec = make_spec(n_users, job["fed"], job["rounds"])
    if job.get("z") is not None:
        spec = replace(spec, noise_multiplier=job["z"])
    elif job["eps"] is None:
        spec = replace(spec, noise_multiplier=0.0, nonprivate=True)
    else:
        spec = replace(spec, noise_multiplier=calibrate(spec, job["eps"], job.get("population", CAL_POP)))
    if job.get("clip") is not None:  # epsilon does not depend on C
        spec = replace(spec, clip_norm=job["clip"])
    if job.get("adaptive_quantile") is not None:  # after calibration: epsilon depends on the total z only
        from dpemb.privacy.adaptive_clipping import AdaptiveClipping

        spec = replace(spec, adaptive_clipping=AdaptiveClipping(job["adaptive_quantile"]))
    return spec


# ----------------------------------------------------------------------------- jobs


def run_job(job: dict[str, Any], work: str, threads: int, perf: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run one training job in a worker process; returns its result record.

    ``perf``: performance-only ``RunConfig`` fields (``device``, ``checkpoint_every``;
    ``client_batch``, used by federated jobs only), which change the model only by float
    rounding, and ``resume``: a federated job continues from the checkpoint an
    interrupted attempt left in its run folder (resuming equals uninterrupted training).

    Optional job fields (absent in this experiment's own jobs, whose defaults they keep):
    ``z`` (an explicit simulation noise multiplier instead of calibrating ``eps``),
    ``population`` (the extrapolated population ``eps`` is calibrated at; CAL_POP)
    and ``noise_seed`` (noise, sampling and client randomness; 1234)."""
    import torch

    torch.set_num_threads(threads)
    from dpemb.data.dataset import UserDataset
    from dpemb.training.config import ModelConfig, OptimConfig, RunConfig
    from dpemb.training.provenance import Provenance

    t0 = time.time()
    data = Path(work) / "data" / job["regime"]
    out = Path(work) / "runs" / job["key"]
    # tuning runs are scored on the validation split, every reported run on the test split
    ev = UserDataset.load(data / ("validation" if job.get("eval_split") == "validation" else "eval"),
                          mmap=False)
    init = job.get("init", "random")
    if init != "random":
        init = str(Path(work) / "runs" / init)  # the run's release artifact
    mcfg = ModelConfig("lenet", EMB, job["width"], init, job.get("trainable", "all"))
    perf = dict(perf or {})
    client_batch, resume = perf.pop("client_batch", 1), perf.pop("resume", False)
    rcfg_kw = dict(out=str(out), seed=job.get("seed", 0), progress=False, threads=threads, **perf)
    rec: dict[str, Any] = {"job": job}
    if job["kind"] in ("central", "pretrain"):
        from dpemb.training.centralized import train_centralized

        tr = UserDataset.load(data / ("public" if job["kind"] == "pretrain" else "train"), mmap=False)
        steps = job["steps"]
        rep = train_centralized(tr, ev, mcfg, OptimConfig(lr=0.05, momentum=0.9, batch_size=CENTRAL_BATCH,
                                                          steps=steps, cosine=True,
                                                          loss=job.get("loss", "softmax")),
                                RunConfig(eval_every=steps, **rcfg_kw),
                                provenance=Provenance(str(data), "public" if job["kind"] == "pretrain" else "private"))
        rec.update(final=rep["final"][METRIC], initial=(rep.get("initial") or {}).get(METRIC))
    else:
        from dpemb.algorithms.config import FederatedConfig
        from dpemb.training.federated import train_federated

        tr = UserDataset.load(data / "train", mmap=False)
        before = _round_times(out) if resume else []
        fed = job["fed"]
        spec = job_spec(job, tr.num_users)
        fkw = {k: v for k, v in fed.items() if k not in ("M", "K")}
        fcfg = FederatedConfig(**fkw)
        rep = train_federated(tr, ev, mcfg, fcfg, spec,
                              RunConfig(eval_every=job["rounds"], client_batch=client_batch, **rcfg_kw),
                              noise_seed=job.get("noise_seed", 1234), resume="auto" if resume else False,
                              provenance=Provenance(str(data), "private"),
                              public=UserDataset.load(data / "public", mmap=False) if fcfg.public_negatives else None)
        rows = _run_rows(out)
        losses = [r["train_loss"] for r in rows if r.get("train_loss") is not None]
        norms = [r["preclip_norm_mean"] for r in rows if r.get("preclip_norm_mean") is not None]
        rec.update(final=rep["final"][METRIC], initial=rep["initial"].get(METRIC),
                   final_loss=float(np.mean(losses[-10:])) if losses else None,
                   preclip_norm=float(np.mean(norms[-10:])) if norms else None,
                   head_params=tr.num_classes * EMB,
                   final_clip_norm=(rep["privacy"].get("adaptive_clipping") or {}).get("final_clip_norm"),
                   **privacy_numbers(spec))
        earlier = earlier_invocations_seconds(before, _round_times(out))
        if earlier:  # a resumed run costs its earlier invocations' rounds too
            rec["seconds_this_invocation"], rec["seconds_earlier_invocations"] = time.time() - t0, earlier
    rec["seconds"] = time.time() - t0 + rec.get("seconds_earlier_invocations", 0.0)
    rec["perf"] = {"threads": threads, "client_batch": client_batch, "resume": resume, **perf,
                   "device_name": torch.cuda.get_device_name() if torch.cuda.is_available()
                   and perf.get("device", "auto") != "cpu" else "cpu"}
    rec["started_at"], rec["finished_at"] = t0, time.time()
    return rec


def _round_times(out: Path) -> list[tuple[int, float]]:
    """(round, seconds) of each round a run folder's private diagnostics record."""
    f = out / "private" / "diagnostics.jsonl"
    if not f.is_file():
        return []
    rows = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return [(r["round"], r["seconds"]) for r in rows if "seconds" in r and not r.get("summary")]


def earlier_invocations_seconds(before: list[tuple[int, float]], after: list[tuple[int, float]]) -> float:
    """Training seconds of the rounds a resumed run kept from its earlier invocations:
    the records present before this invocation (``before``) that are still there after
    it (``after``; a resume drops the rounds past the checkpoint, which it trains again)."""
    kept = set(before)
    return float(sum(sec for rnd, sec in after if (rnd, sec) in kept))


def _run_rows(out: Path) -> list[dict[str, Any]]:
    """The per-round records of a finished run (released metrics.jsonl and, where the
    trainer keeps them apart, its private diagnostics: this experiment reads its own run
    folders into its work records, which the public export and the pages filter)."""
    rows: list[dict[str, Any]] = []
    for f in (out / "metrics.jsonl", out / "private" / "diagnostics.jsonl"):
        if f.is_file():
            rows += [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return rows


def run_all(jobs: list[dict[str, Any]], results: dict[str, Any], work: Path, nproc: int,
            deadline: float, results_file: str = "results.json", perf: dict[str, Any] | None = None) -> None:
    """Run the jobs not yet in ``results`` on ``nproc`` processes; save after each
    (to ``<work>/<results_file>``). ``perf``: see ``run_job``; its ``threads`` (torch
    threads per process) defaults to the cores divided among the processes."""
    todo = [j for j in jobs if j["key"] not in results]
    if not todo:
        return
    perf = dict(perf or {})
    threads = perf.pop("threads", 0) or max(1, (os.cpu_count() or 2) // nproc)
    print(f"  {len(todo)} runs on {nproc} processes x {threads} threads", flush=True)
    terminated = []

    def on_sigterm(signum: int, frame: Any) -> None:
        terminated.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with ProcessPoolExecutor(nproc, mp_context=get_context("spawn")) as pool:
            try:
                _run_queue(pool, todo, results, work, nproc, deadline, results_file, threads, perf)
            except KeyboardInterrupt:
                # Ctrl-C reached the workers too; a SIGTERM reached this process only: pass it
                # on. Each worker's run then finishes its round, checkpoints and stops
                # (--resume-runs continues it), instead of training on as an orphan.
                if terminated:
                    for child in active_children():
                        child.terminate()
                pool.shutdown(wait=True, cancel_futures=True)
                raise SystemExit("stopped by a signal: the running jobs checkpointed and stopped; re-run the "
                                 "command (with --resume-runs, where it takes it) to continue them") from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_queue(pool: ProcessPoolExecutor, todo: list[dict[str, Any]], results: dict[str, Any], work: Path,
               nproc: int, deadline: float, results_file: str, threads: int, perf: dict[str, Any]) -> None:
    """``run_all``'s loop: keep ``nproc`` jobs running, record each as it finishes."""
    pending = {}
    queue = list(todo)
    while queue or pending:
        while queue and len(pending) < nproc and time.time() < deadline:
            j = queue.pop(0)
            pending[pool.submit(run_job, j, str(work), threads, perf)] = j
        if not pending:
            print("  time budget exhausted; re-run the command to continue", flush=True)
            return
        done, _ = wait(pending, return_when=FIRST_COMPLETED)
        for f in done:
            j = pending.pop(f)
            try:
                rec = f.result()
            except Exception:  # record the failure, keep going
                print(f"  FAILED {j['key']}:\n{traceback.format_exc()}", flush=True)
                continue
            results[j["key"]] = rec
            save_results(work, results, results_file)
            LOAD_SAMPLES.append(round(os.getloadavg()[0], 2))
            print(f"  done {j['key']}: R@1e-3 {rec['final']:.3f} on {j.get('eval_split', 'test')} "
                  f"({rec['seconds']:.0f} s)", flush=True)


LOAD_SAMPLES: list[float] = []  # 1-minute load average after each finished run


def save_results(work: Path, results: dict[str, Any], results_file: str = "results.json") -> None:
    from dpemb.atomic import atomic_write_text

    atomic_write_text(work / results_file, json.dumps(results, indent=1, default=str))


# ----------------------------------------------------------------------------- the plan


def fed_job(regime: str, reg: dict[str, Any], algo: str, K: int, eps: float | None, *,
            init: str | None, width: float = WIDTH_MAIN, tag: str = "", eval_split: str = "test",
            **knobs: Any) -> dict[str, Any]:
    M = 8 if K > 1 else 32  # same users per round (32) for K = 1 and K = 4
    fed = {**BASE_FED, "algorithm": algo, "M": M, "K": K, "max_examples_per_client": reg["max_examples"], **knobs}
    ks = "-".join(f"{k}{v}" for k, v in sorted(knobs.items()))
    e = "np" if eps is None else f"e{eps:g}"
    split = "" if eval_split == "test" else f"@{eval_split}"
    key = f"{regime}/{algo}/K{K}/{e}/w{width:g}/{'pre' if init else 'rand'}/{ks or 'base'}{tag}{split}"
    return dict(key=key, kind="fed", regime=regime, width=width, init=init or "random",
                rounds=reg["rounds"], eps=eps, fed=fed, knobs=knobs, eval_split=eval_split)


def seeded_fed_job(key: str, regime: str, rounds: int, fed: dict[str, Any], knobs: dict[str, Any],
                   eps: float | None, *, seed: int, noise_seed: int, population: int | None = None,
                   eval_split: str = "test", **fields: Any) -> dict[str, Any]:
    """A federated job from the public pretraining with an explicit run seed and noise
    seed (``run_job``'s optional fields); ``population``: the N' ``eps`` is calibrated at;
    ``fields``: other optional job fields (``z``, ``clip``, ``adaptive_quantile``, ``delta``,
    ``accountant``)."""
    job = dict(key=key, kind="fed", regime=regime, width=WIDTH_MAIN, init=pre_key(regime, WIDTH_MAIN),
               rounds=rounds, eps=eps, fed=fed, knobs=knobs, eval_split=eval_split, seed=seed,
               noise_seed=noise_seed)
    return job | ({"population": population} if population is not None else {}) | fields


def tune_job(regime: str, reg: dict[str, Any], algo: str, knobs: dict[str, Any]) -> dict[str, Any]:
    """A tuning run: K = 4, TUNE_EPS, from the public pretraining, scored on VALIDATION."""
    return fed_job(regime, reg, algo, 4, TUNE_EPS, init=pre_key(regime, WIDTH_MAIN),
                   eval_split="validation", **knobs)


def reported(v: dict[str, Any]) -> bool:
    """A run whose score is a test-split number (every run except the tuning runs)."""
    return v["job"].get("eval_split", "test") == "test"


def best_knobs(results: dict[str, Any], regime: str, reg: dict[str, Any], algo: str) -> dict[str, Any]:
    """The grid entry with the best VALIDATION score (the test split is never looked at)."""
    scores = []
    for knobs in GRID[algo]:
        j = tune_job(regime, reg, algo, knobs)
        if j["key"] in results:
            scores.append((results[j["key"]]["final"], knobs))
    return max(scores, key=lambda s: s[0])[1] if scores else GRID[algo][0]


def pre_key(regime: str, width: float) -> str:
    return f"{regime}/pretrain/w{width:g}"


def pretrain_job(regime: str, reg: dict[str, Any], width: float = WIDTH_MAIN) -> dict[str, Any]:
    """Centralized training on the regime's public users: the start of every "pre" run."""
    return dict(key=pre_key(regime, width), kind="pretrain", regime=regime, width=width,
                steps=reg["pretrain_steps"])


def add_invocation(timing: dict[str, Any], elapsed: float, loads: list[float]) -> dict[str, Any]:
    """``timing`` (empty: a run from an empty work folder) plus one invocation that ran
    for ``elapsed`` seconds."""
    return {"wall_minutes": timing.get("wall_minutes", 0.0) + elapsed / 60,
            "invocations": timing.get("invocations", 1 if timing else 0) + 1,
            "load_samples": timing.get("load_samples", []) + list(loads),
            "finished": time.strftime("%Y-%m-%d %H:%M")}


def invocations_txt(timing: dict[str, Any]) -> str:
    """' in 3 invocations' when the run was resumed; '' otherwise."""
    n = timing.get("invocations", 1)
    return f" in {n} invocations" if n > 1 else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / "runs" / "fedemb_glyphs"), help="runs and results.json")
    ap.add_argument("--docs", default=str(ROOT / "docs"), help="where RESULTS_FEDEMB.md and img/ go")
    ap.add_argument("--font-dir", action="append", default=[], help="extra font files/directories")
    ap.add_argument("--jobs", type=int, default=2, help="parallel training processes")
    ap.add_argument("--budget-minutes", type=float, default=58.0, help="stop starting runs after this")
    ap.add_argument("--quick", action="store_true", help="tiny smoke-test version")
    ap.add_argument("--report-only", action="store_true", help="only rewrite the results page")
    args = ap.parse_args()
    t_start = time.time()
    deadline = t_start + 60 * args.budget_minutes
    work = Path(args.work + ("_quick" if args.quick else ""))
    work.mkdir(parents=True, exist_ok=True)
    rp = work / "results.json"
    results: dict[str, Any] = json.loads(rp.read_text()) if rp.exists() else {}
    cached_at_start = len(results)
    regs = regimes(args.quick)
    info = {n: json.loads((work / "data" / n / "info.json").read_text()) for n in regs
            if (work / "data" / n / "info.json").exists()}
    if not args.report_only:
        for name, reg in regs.items():
            t = time.time()
            info[name] = build_data(work, name, reg, args.font_dir)
            print(f"data {name}: {info[name]['train']} ({time.time() - t:.0f} s)", flush=True)
        # phase 1: centralized, public pretraining (both widths for the face-like regime)
        p1 = []
        for name, reg in regs.items():
            p1.append(dict(key=f"{name}/central/w{WIDTH_MAIN:g}", kind="central", regime=name,
                           width=WIDTH_MAIN, steps=reg["central_steps"]))
            p1.append(pretrain_job(name, reg))
        p1.append(pretrain_job("face", regs["face"], WIDTH_BIG))
        print("phase 1: centralized and public pretraining", flush=True)
        run_all(p1, results, work, args.jobs, deadline)
        # phase 2: tuning grid (same budget per algorithm)
        p2 = [tune_job(n, r, a, k) for n, r in regs.items() for a in GRID for k in GRID[a]]
        print("phase 2: tuning (scored on the validation split)", flush=True)
        run_all(p2, results, work, args.jobs, deadline)
        # phase 2b: centralized fine-tuning of the public pretraining (the reference for
        # the pretrained federated runs)
        p4 = [dict(key=f"{n}/central-pre/w{WIDTH_MAIN:g}", kind="central", regime=n, width=WIDTH_MAIN,
                   steps=r["central_steps"], init=pre_key(n, WIDTH_MAIN)) for n, r in regs.items()]
        print("phase 2b: centralized from the public pretraining", flush=True)
        run_all(p4, results, work, args.jobs, deadline)
        # phase 3: comparison at equal epsilon with the tuned knobs
        p3 = []
        for n, r in regs.items():
            kn = {a: best_knobs(results, n, r, a) for a in GRID}
            pre = pre_key(n, WIDTH_MAIN)
            for a in GRID:
                for eps in (None, *EPSILONS):
                    p3.append(fed_job(n, r, a, 4, eps, init=pre, **kn[a]))
                for eps in (None, TUNE_EPS):
                    p3.append(fed_job(n, r, a, 1, eps, init=pre, **kn[a]))
                    p3.append(fed_job(n, r, a, 4, eps, init=None, **kn[a]))
            for eps in (EPSILONS[0], TUNE_EPS):
                p3.append(fed_job(n, r, "dp-ftrl-fedemb", 4, eps, init=pre, **kn["dp-fedemb"]))
        # head/backbone ratio: the face-like regime at a 4x wider backbone
        r = regs["face"]
        kn = {a: best_knobs(results, "face", r, a) for a in GRID}
        for a in GRID:
            for eps in (None, TUNE_EPS):
                p3.append(fed_job("face", r, a, 4, eps, init=pre_key("face", WIDTH_BIG),
                                  width=WIDTH_BIG, **kn[a]))
        # order: main comparison first, extras (K=1, random init, width) later
        p3.sort(key=lambda j: (j["width"] != WIDTH_MAIN, j["init"] == "random", j["fed"]["K"] == 1))
        print("phase 3: comparison at equal epsilon (scored on the test split)", flush=True)
        run_all(p3, results, work, args.jobs, deadline)
    elapsed = time.time() - t_start
    timing_path = work / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {}
    # the page's run time counts the invocations that ran something: a re-run that found
    # every run cached (--report-only, or all_results.py) leaves it as it was
    if len(results) > cached_at_start:
        timing = add_invocation(timing if cached_at_start else {}, elapsed, LOAD_SAMPLES)
        from dpemb.atomic import atomic_write_text

        atomic_write_text(timing_path, json.dumps(timing))
    write_report(results, regs, work, Path(args.docs), timing, args, info)
    print(f"wrote {Path(args.docs) / 'RESULTS_FEDEMB.md'} ({elapsed / 60:.1f} min)")
    return 0

# ----------------------------------------------------------------------------- the report

ALGO_NAME = {"dp-fedavg": "DP-FedAvg", "dp-fedemb": "DP-FedEmb", "dp-ftrl-fedemb": "DP-FTRL-FedEmb"}


def _f(x: Any, nd: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if math.isinf(x):
            return "inf"
        if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
            return f"{x:.2g}"
        return f"{x:.{nd}f}"
    return str(x)


def _label(j: dict[str, Any]) -> str:
    return (f"{ALGO_NAME[j['fed']['algorithm']]} K={j['fed']['K']} M={j['fed']['M']}"
            f"{'' if j['init'] != 'random' else ', random init'}"
            + ("" if j["width"] == WIDTH_MAIN else ", width %g" % j["width"]))


def _knobs(k: dict[str, Any]) -> str:
    return ", ".join(f"{a}={b}" for a, b in sorted(k.items())) or "defaults"


def _backbone_params(width: float, size: int = 28) -> int:
    from dpemb.models import build_backbone

    m = build_backbone("lenet", in_channels=1, image_size=size, embedding_dim=EMB, width=width)
    return sum(p.numel() for p in m.parameters())


def tolerated_noise(curves: dict[str, list[tuple[float, float, dict]]], level: float) -> dict[str, Any]:
    """For each algorithm: the largest noise on the average at which its recall-vs-noise
    curve (linear interpolation in log noise between measured points) is >= level."""
    out = {}
    for algo, pts in curves.items():
        pts = sorted(p for p in pts if p[0] > 0)
        best = None
        for (n0, r0, j0), (n1, r1, j1) in zip(pts, pts[1:]):
            if r0 >= level > r1:
                t = (r0 - level) / (r0 - r1)
                best = (math.exp(math.log(n0) + t * (math.log(n1) - math.log(n0))), j0)
        if best is None and pts and all(r >= level for _, r, _ in pts):
            best = (pts[-1][0], dict(pts[-1][2], at_least=True))  # >= the largest measured noise
        out[algo] = best
    return out


def write_report(results: dict[str, Any], regs: dict[str, Any], work: Path, docs: Path,
                 timing: dict[str, Any], args: Any, info: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from dpemb.privacy.accounting import extrapolate

    img = docs / "img"
    img.mkdir(parents=True, exist_ok=True)
    fed = {k: v for k, v in results.items() if v["job"]["kind"] == "fed" and reported(v)}
    L: list[str] = []
    w = L.append
    cmd = "python experiments/fedemb_glyphs.py" + "".join(f" --font-dir {d}" for d in args.font_dir) + \
        (" --quick" if args.quick else "")
    secs = sum(v.get("seconds", 0) for v in results.values())
    w("# DP-FedEmb on the glyph benchmark: results\n")
    loads = timing.get("load_samples") or []
    load_txt = (f"1-minute load average after each run: median {float(np.median(loads)):.1f}, max "
                f"{max(loads):.1f} on 2 cores" if loads else "load average not recorded")
    w(f"Produced by one command: `{cmd}` (`.venv/bin/python`, from the repository root). "
      f"{len(results)} runs, {secs / 60:.0f} process-minutes of training on 2 processes x 1 "
      f"thread; **wall time {timing.get('wall_minutes', math.nan):.1f} min** from an empty work "
      f"folder{invocations_txt(timing)}, data generation included (finished {timing.get('finished', '?')}; {load_txt}). "
      "Finished runs are kept in "
      f"`{work.relative_to(ROOT) if work.is_relative_to(ROOT) else work}/results.json` and reused, "
      "so an interrupted run continues where it stopped.\n")
    w("**Setup.** The face-like regime needs thousands of identities, i.e. CJK fonts: "
      f"`make cjk-fonts` (= `{APT_LINE}`; without root rights the packages are extracted "
      "into `~/.cache/dpemb/debroot` and the fonts linked into `~/.local/share/fonts`). "
      f"Identity pool here: {(info.get('face') or {}).get('pool_size', '?')} identities from "
      f"{(info.get('face') or {}).get('fonts', '?')} faces. The script checks the pool and stops "
      "with this advice when it is too small.\n")
    w("## Conventions\n")
    w("- Utility: Recall@FAR=1e-3 (exact, all pairs) on the TEST split: test users' images of "
      "test identities. Test users and identities are disjoint from the training, public and "
      "validation ones (face-like: new people; handwriting-like: held-out characters written "
      "by writers who are never trained on), so no reported number is a statistic of a "
      "private training user. One seed per configuration (differences under about 0.02 are "
      "within seed noise).")
    w("- Selection: hyperparameters are chosen on the VALIDATION split (its own users and "
      "identities, disjoint from training and test); the tuning scores below are validation "
      "numbers and are not reported anywhere else. Every other number on this page is a "
      "test-split number; nothing was chosen by looking at it.")
    w("- Privacy: user-level (epsilon, delta)-DP, RDP accountant. Gaussian mechanism with "
      "Poisson sampling of M virtual clients of K users, add/remove-one-user relation, "
      "sensitivity C for K = 1 and 2C for K > 1; DP-FTRL-FedEmb: tree aggregation, epoch "
      "sampling, replace-special relation. Clip norm C = 0.3.")
    w(f"- **Equal epsilon** means the noise multiplier of every configuration (its own K, M, "
      f"rounds and mechanism) was calibrated with `calibrate_noise_multiplier` so that the run "
      f"extrapolated to {CAL_POP:,} users has the target epsilon at delta = 1e-6. "
      "Extrapolation is the paper's convention (`dpemb.privacy.accounting.extrapolate`): "
      "utility is measured in simulation with noise multiplier z and M clients per round over "
      "N users; the deployed run has k = N'/N times more clients per round and k times more "
      "noise (z x k), so the noise on the averaged update (z x sensitivity / M) and the "
      "sampling rate are unchanged, and delta = 1/N'. Epsilon at the simulated population "
      "(delta = 1/(10 N), the training default) is listed too; it is astronomically large, because the noise that "
      "training survives with a few thousand users buys no privacy at that size.")
    w("- 'noise/avg' is the noise standard deviation per coordinate of the averaged update, "
      "z x sensitivity / M: what training actually feels. Equal epsilon is NOT equal "
      "noise: with K = 4 the sensitivity doubles, and with K = 1 there are 4x more clients "
      "per round (M = 32 vs 8, the same 32 users per round).\n")
    w("## Fixed settings and what was cut to fit 60 minutes\n")
    for name, reg in regs.items():
        inf = info.get(name) or {}  # main() loads info.json of every regime built so far
        g = reg["glyph"]
        w(f"- **{reg['title']}**: glyphs `{json.dumps(g)}`; train split {inf.get('train')}, "
          f"public {inf.get('public')}, validation {inf.get('validation')}, test "
          f"{inf.get('eval')} (validation and test each capped at {reg['eval_cap']} images); "
          f"{reg['rounds']} rounds; Nmax = {reg['max_examples']}.")
    w(f"- Federated: LeNet width {WIDTH_MAIN} (main) and {WIDTH_BIG}, embedding {EMB}; "
      f"local batch 32, one local epoch, client SGD lr 0.05, server SGD lr 1.0 momentum 0.9, "
      "unless the tuning changed it. K = 4 uses M = 8, K = 1 uses M = 32.")
    w("- Cut to fit: one seed; 150-200 rounds (the paper runs thousands); the handwriting-like "
      "clients train on at most 64 examples per round (Nmax); K = 1, random initialisation and "
      "width 1.0 only at no noise and at the tuning epsilon; DP-FTRL-FedEmb only at two "
      "epsilons; the handwriting-like regime has no width variation; evaluation only at the start (= pretrained-only score) and the end.\n")
    w(f"**Tuning (same budget for both).** {len(GRID['dp-fedavg'])} runs per algorithm at K = 4, "
      f"epsilon {TUNE_EPS} (at 1M users), from the public pretraining: "
      + "; ".join(f"{ALGO_NAME[a]}: " + " / ".join(_knobs(k) for k in GRID[a]) for a in GRID)
      + ". Each is scored on the VALIDATION split; the best of each is used for every other run "
      "of that regime (DP-FTRL-FedEmb takes DP-FedEmb's), all scored on the test split (the "
      "selected configuration is trained again and scored on test).\n")

    summary_rows, notes = [], {name: regime_scope(results, name, info) for name in regs}
    for name, reg in regs.items():
        w(f"## {reg['title'].capitalize()}\n")
        w(notes[name] + "\n")
        cen = results.get(f"{name}/central/w{WIDTH_MAIN:g}")
        pre = results.get(pre_key(name, WIDTH_MAIN))
        rand0 = [v["initial"] for v in fed.values() if v["job"]["regime"] == name
                 and v["job"]["init"] == "random" and v["job"]["width"] == WIDTH_MAIN]
        w("| reference | Recall@FAR=1e-3 |\n|---|---|")
        w(f"| random initialisation | {_f(rand0[0]) if rand0 else '-'} |")
        w(f"| public pretraining only (centralized on the public users) | {_f(pre['final']) if pre else '-'} |")
        w(f"| centralized, non-private, from scratch ({reg['central_steps']} steps of 128) | "
          f"{_f(cen['final']) if cen else '-'} |")
        cp = results.get(f"{name}/central-pre/w{WIDTH_MAIN:g}")
        w(f"| centralized, non-private, from the public pretraining ({reg['central_steps']} steps) | "
          f"{_f(cp['final']) if cp else 'not run'} |\n")
        if cp and (not cen or cp["final"] > cen["final"]):
            cen = cp  # the stronger centralized reference is drawn in the plots
        # tuning
        w("Tuning (K = 4, pretrained, epsilon " + f"{TUNE_EPS} at 1M), scored on the VALIDATION "
          "split (selection only; not a reported result):\n")
        w("| algorithm | knobs | validation Recall@FAR=1e-3 | selected |\n|---|---|---|---|")
        for a in GRID:
            best = best_knobs(results, name, reg, a)
            for k in GRID[a]:
                r = results.get(tune_job(name, reg, a, k)["key"])
                w(f"| {ALGO_NAME[a]} | {_knobs(k)} | {_f(r['final']) if r else 'not run'} | "
                  f"{'yes' if r and k == best else ''} |")
        w("")
        # main equal-epsilon table
        eps_cols: list[float | None] = [None, *EPSILONS]
        rows: dict[str, dict[Any, dict]] = {}
        tuned = {a: best_knobs(results, name, reg, a) for a in GRID}
        for v in fed.values():
            j = v["job"]
            if j["regime"] != name:
                continue
            kn = tuned["dp-fedemb" if "fedemb" in j["fed"]["algorithm"] else "dp-fedavg"]
            cell = rows.setdefault(_label(j), {})
            if j["knobs"] == kn:
                cell[j["eps"]] = v
            elif j["eps"] not in cell:  # a run with an earlier tuning result (marked)
                cell[j["eps"]] = dict(v, stale=True)
        w(f"Recall@FAR=1e-3 at equal epsilon (RDP, delta 1e-6, user-level, add/remove; epsilon "
          f"of the run extrapolated to 1M users), tuned knobs; in brackets the noise on the "
          f"averaged update:\n")
        w("| configuration | " + " | ".join("no noise" if e is None else f"eps {e:g}" for e in eps_cols)
          + " |\n|---|" + "---|" * len(eps_cols))
        for lab in sorted(rows):
            cells = []
            for e in eps_cols:
                v = rows[lab].get(e)
                mark = "†" if v is not None and v.get("stale") else ""
                cells.append("-" if v is None else (_f(v["final"]) + mark if e is None else
                             f"{_f(v['final'])}{mark} ({v['noise_on_average']:.1e})"))
            w(f"| {lab} | " + " | ".join(cells) + " |")
        if any(v.get("stale") for c in rows.values() for v in c.values()):
            w("† run with knobs other than the ones the tuning now selects (an earlier tuning "
              "result; re-run it by deleting its entry from results.json).")
        w("")
        # details
        w("<details><summary>every run of this regime (noise, epsilons; 's': its training seconds, benchmark "
          "timing on the built-in synthetic data)</summary>\n")
        w("| run | z (sim) | noise/avg | eps at N (delta 1/(10N)) | eps 1M | eps 10M | init score | final | "
          "s |\n|---|---|---|---|---|---|---|---|---|")
        for k in sorted(fed):
            v = fed[k]
            if v["job"]["regime"] != name:
                continue
            w(f"| `{k.split('/', 1)[1]}` | {_f(v.get('z'), 4)} | {_f(v.get('noise_on_average'))} | "
              f"{_f(v.get('eps_sim'))} | {_f(v.get('eps_1000000'))} | {_f(v.get('eps_10000000'))} | "
              f"{_f(v.get('initial'))} | {_f(v['final'])} | {v.get('seconds', 0):.0f} |")
        w("\n</details>\n")
        # tolerated noise at equal utility
        curves = {}
        for a in GRID:
            lab = f"{ALGO_NAME[a]} K=4 M=8"
            pts = [(v["noise_on_average"], v["final"], v) for e, v in rows.get(lab, {}).items() if e is not None]
            curves[a] = pts
        if all(curves.values()):
            level = min(max(r for _, r, _ in pts) for pts in curves.values())
            level = round(level - 0.02, 3)
        if all(curves.values()) and level < 0.05:
            w("**Largest noise tolerated at equal utility**: not defined here, because one "
              "algorithm never reaches a useful Recall@FAR=1e-3 at any measured noise level.\n")
        elif all(curves.values()):
            levels = sorted({level, *[x for x in (0.45, 0.3) if x < level]}, reverse=True)
            w(f"**Largest noise tolerated at equal utility** (the poster's convention): the largest "
              f"noise on the averaged update at which each algorithm (K = 4, M = 8, pretrained) "
              f"still reaches a given Recall@FAR=1e-3 (interpolated in log noise between measured "
              f"levels; the first level is 0.02 below the weaker algorithm's best noisy score), "
              f"written as the simulation noise multiplier z x the extrapolation factor, "
              f"and the epsilon that noise gives:\n")
            w("| utility level | algorithm | noise/avg tolerated | z at N | eps at 1M (z x k) | eps at 10M (z x k) |\n"
              "|---|---|---|---|---|---|")
            n_train = info[name]["train"]["users"]
            for a, t in [(f"{lv:.3f}|{a}", t) for lv in levels for a, t in tolerated_noise(curves, lv).items()]:
                lv, a = a.split("|")
                if t is None:
                    w(f"| {lv} | {ALGO_NAME[a]} | below the smallest measured | - | - | - |")
                    continue
                na, v = t
                spec = make_spec(n_train, v["job"]["fed"], v["job"]["rounds"])
                z = na * 8 / spec.sensitivity
                spec = replace(spec, noise_multiplier=z)
                eps = {n: extrapolate(spec, n) for n in EXTRA_POPS}
                ge, le = ("≥ ", "≤ ") if v.get("at_least") else ("", "")
                w(f"| {lv} | {ALGO_NAME[a]} | {ge}{na:.2e} | {ge}{z:.4f} | {le}{eps[CAL_POP].epsilon:.3g} "
                  f"({z:.4f} x {eps[CAL_POP].factor:.0f}) | {le}{eps[10_000_000].epsilon:.3g} "
                  f"({z:.4f} x {eps[10_000_000].factor:.0f}) |")
            w("")
        # head / backbone ratio
        if name == "face":
            w("**Head / backbone size.** DP-FedAvg clips and noises its global head (identities x "
              f"{EMB}) with the backbone; DP-FedEmb noises only the backbone.\n")
            n_ids = info[name]["train"]["identities"]
            w("| backbone | backbone params | head params | head/backbone | DP-FedAvg no noise | "
              f"DP-FedEmb no noise | DP-FedAvg eps {TUNE_EPS:g} | DP-FedEmb eps {TUNE_EPS:g} |\n"
              "|---|---|---|---|---|---|---|---|")
            for wd in (WIDTH_MAIN, WIDTH_BIG):
                bp = _backbone_params(wd)
                cells = []
                for e in (None, TUNE_EPS):
                    for a in GRID:
                        j = fed_job(name, reg, a, 4, e, init=pre_key(name, wd), width=wd, **tuned[a])
                        r = results.get(j["key"])
                        cells.append(_f(r["final"]) if r else "-")
                pw = results.get(pre_key(name, wd))
                w(f"| LeNet width {wd:g} (pretrained-only {_f(pw['final']) if pw else '-'}) | {bp:,} | "
                  f"{n_ids * EMB:,} | {n_ids * EMB / bp:.1f} | " + " | ".join(cells) + " |")
            w("")
        # plots
        fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
        for lab in sorted(rows):
            pts = sorted((v["noise_on_average"], v["final"], v.get("eps_1000000"), v.get("eps_10000000"))
                         for e, v in rows[lab].items() if e is not None)
            if not pts:
                continue
            style = "--" if "random" in lab or "width" in lab else "-"
            for ax, col in zip(axes, (2, 3, 0)):
                ax.plot([p[col] for p in pts], [p[1] for p in pts], style, marker="o", label=lab)
        for ax, xl in zip(axes, ("epsilon at 1M users (extrapolated, RDP, delta 1e-6)",
                                 "epsilon at 10M users (same runs, delta 1e-7)",
                                 "noise std on the averaged update")):
            ax.set_xscale("log")
            ax.set_xlabel(xl)
            ax.set_ylabel("Recall@FAR=1e-3 (test users and identities)")
            if cen:
                ax.axhline(cen["final"], color="k", lw=1, label="centralized (non-private)")
            if pre:
                ax.axhline(pre["final"], color="gray", ls=":", lw=1, label="public pretraining only")
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)
        fig.suptitle(f"Privacy-utility, {reg['title']}")
        fig.tight_layout()
        fig.savefig(img / f"fedemb_{name}_privacy_utility.png", dpi=110)
        plt.close(fig)
        w(f"![privacy-utility, {name}](img/fedemb_{name}_privacy_utility.png)\n")
        summary_rows.append((name, rows, cen, pre, notes[name]))
    w(FINDINGS)
    (docs / "RESULTS_FEDEMB.md").write_text("\n".join(L) + "\n")
    from results_page import update_section

    update_section(docs, "fedemb", headline(summary_rows, regs, cmd, timing.get("wall_minutes", math.nan)))


def regime_scope(results: dict[str, Any], name: str, info: dict[str, Any]) -> str:
    """What one regime's ε covers (epsilon_scope), from its runs' records."""
    from epsilon_scope import scope_note

    return scope_note([v for v in results.values() if v["job"]["regime"] == name],
                      users=((info.get(name) or {}).get("train") or {}).get("users"),
                      headline=f"Every ε of this regime (at {CAL_POP // 1_000_000}M users)",
                      source="'eps at N' in RESULTS_FEDEMB.md's tables of every run")


def headline(summary_rows: list[tuple], regs: dict[str, Any], cmd: str, wall_minutes: float) -> str:
    """The docs/RESULTS.md section: the main equal-epsilon comparison and its plots."""
    L = ["## User-level DP embedding training on the glyph benchmark", "",
         f"`{cmd}` ({wall_minutes:.0f} min on 2 cores; `make cjk-fonts` installs the fonts the "
         "face-like regime needs). Recall@FAR=1e-3 (exact, all pairs) on the TEST split: users "
         "and identities never trained on and never used for any choice (the knobs were tuned "
         "on a separate validation split of other users and identities). K = 4 users per virtual "
         "client, M = 8 clients per round, from public pretraining, each algorithm with its tuned "
         "knobs. Equal epsilon: user-level "
         "(ε, δ = 1e-6)-DP, RDP accountant, add/remove-one-user (DP-FTRL: replace-special, tree "
         f"aggregation), each run calibrated so that it has that ε when extrapolated to "
         f"{CAL_POP:,} users (the paper's convention: noise multiplier and clients per round scaled "
         "together). Every run, K = 1, random initialisation, the head/backbone-size variation and "
         "the discussion: [RESULTS_FEDEMB.md](RESULTS_FEDEMB.md).", ""]
    eps_cols: list[float | None] = [None, *EPSILONS]
    for name, rows, cen, pre, note in summary_rows:
        L += [f"**{regs[name]['title']}**", "", note, "",
              "| configuration | " + " | ".join("no noise" if e is None else f"ε {e:g}" for e in eps_cols)
              + " |", "|---|" + "---|" * len(eps_cols)]
        for a in ("dp-fedavg", "dp-fedemb", "dp-ftrl-fedemb"):
            cells = rows.get(f"{ALGO_NAME[a]} K=4 M=8", {})
            if cells:
                L.append(f"| {ALGO_NAME[a]} | " + " | ".join(
                    _f(cells[e]["final"]) if e in cells else "-" for e in eps_cols) + " |")
        n = len(eps_cols)
        if pre:
            L.append(f"| public pretraining only | {_f(pre['final'])} |" + " |" * (n - 1))
        if cen:
            L.append(f"| centralized, non-private | {_f(cen['final'])} |" + " |" * (n - 1))
        avg, emb = rows.get("DP-FedAvg K=4 M=8", {}), rows.get("DP-FedEmb K=4 M=8", {})
        verdicts = []
        for e in eps_cols:
            if e in avg and e in emb:
                d = emb[e]["final"] - avg[e]["final"]
                who = "tie" if abs(d) < 0.02 else ("DP-FedEmb" if d > 0 else "DP-FedAvg")
                verdicts.append(f"{'no noise' if e is None else f'ε {e:g}'}: {who} ({d:+.3f})")
        L += ["", "DP-FedEmb minus DP-FedAvg (|difference| < 0.02 counted as a tie, one seed): "
              + "; ".join(verdicts) + ".", "",
              f"![privacy-utility, {name}](img/fedemb_{name}_privacy_utility.png)", ""]
    return "\n".join(L)


FINDINGS = """## Findings (what we measured; one seed, so differences under ~0.02 are noise)

**Protocol.** Hyperparameters were chosen on the validation split (its own users and
identities); every number in the tables is on the test split, whose users and
identities are never trained on and never looked at for selection. Compared with the
previous version of this page (which selected and reported on one split), the selected
configurations are the same kind (zero head, local batch 8, server lr 0.5) and the
numbers moved by a few hundredths, mostly because the test split is now smaller and
held-out users write the held-out characters.

**Runtime.** The whole experiment (data generation, 75 training runs, plots, this page)
ran in one invocation of about 36 minutes on 2 cores, inside the 60-minute limit.

**The fresh head's initialisation still decides whether DP-FedEmb works.** The
reference's Glorot-uniform head scores 0.538 (face-like) and 0.000 (handwriting-like, a
collapsed embedding) on validation, against 0.666 and 0.233 for the zero head; dpemb's
default is `--head-init zeros`. With it a client with a single local step sends a zero
delta, which is why DP-FedEmb K = 1 in the face-like regime (8 examples, one step) does
not move from the pretrained score (0.648; its clients' deltas are zero by construction).

**Face-like regime (the paper's setting).**
- At equal epsilon (1M users) DP-FedEmb holds its no-noise score far longer: 0.672 (no
  noise), 0.660 (eps 2), 0.664 (0.5), 0.666 (0.2), 0.652 (0.1), 0.591 (0.05); DP-FedAvg
  0.679, 0.680, 0.670, 0.650, 0.551, 0.224. They tie at eps >= 0.2; below it DP-FedEmb
  is ahead by 0.10 (eps 0.1) and 0.37 (eps 0.05).
- In the poster's convention, at Recall 0.646 DP-FedEmb tolerates 1.8x the noise of
  DP-FedAvg (0.0207 x 218 vs 0.0118 x 218 at 1M users, i.e. epsilon 0.096 vs 0.195);
  the poster reports 0.02 x 64 vs 0.015 x 64 on DigiFace: the same direction.
- The private phase adds little over public pretraining (0.648): the best federated
  run at width 0.25 gains 0.03, while centralized fine-tuning of the same pretraining
  reaches 0.836 (issue #11 measures virtual clients of 16-32 users that close this gap).
- Head/backbone ratio: with a 4x wider backbone (head 1.3x the backbone instead of
  5.7x) DP-FedEmb keeps its no-noise score at eps 0.5 (0.707 -> 0.709) and DP-FedAvg
  loses 0.04 (0.733 -> 0.696).
- Public pretraining is essential: from random initialisation (0.248) DP-FedAvg
  collapses (0.008-0.037) and DP-FedEmb reaches 0.29-0.37.
- DP-FTRL-FedEmb (tree noise, epoch sampling): 0.653 at eps 2 and 0.643 at eps 0.5,
  with 12-24x the noise on the average of Poisson-sampled DP-FedEmb at the same epsilon.

**Handwriting-like regime (identities shared by all users).** DP-FedAvg wins, as
expected when the head is small (535 identities) and every user holds every class:
0.279 vs 0.234 without noise, 0.273 vs 0.229 at eps 0.5, tied at eps 0.05 (0.156 vs
0.161); DP-FedAvg K = 1 scores 0.324. The public pretraining alone scores 0.249 and
centralized training 0.26-0.34. From random initialisation DP-FedAvg reaches 0.14 and
DP-FedEmb stays at the random level (0.05).

**Extrapolation.** Each run's utility is measured once; the extrapolated epsilon at 1M
and 10M users is the guarantee of the same run scaled up (z and M times k, the paper's
convention with delta = 1/N'). At the simulated population (a few thousand users) the
same runs have epsilon of 1e2-1e7 (at the training default delta 1/(10 N)), which is no
guarantee at all. The paper's "gap to centralized shrinks as the population grows"
follows from this convention; it is not an independent measurement.
"""


if __name__ == "__main__":
    raise SystemExit(main())
