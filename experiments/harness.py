#!/usr/bin/env python
"""The one harness of dpemb's studies: a study is data (named ``TrainConfig`` runs built by
short functions, in ``experiments/studies/NAME.py``), run and rendered here.

    .venv/bin/python experiments/harness.py long --jobs 2      # run what is missing, then render
    .venv/bin/python experiments/harness.py long --render-only # rewrite the pages from the export
    .venv/bin/python experiments/harness.py long --no-train    # export the runs finished under --work, train none

Runner: every run goes through ``dpemb.training.runner.train`` (the path of ``dpemb
train``) into ``<work>/runs/<key>`` (``config_key``), so a configuration two studies share
runs once. A run whose key is in the export, or whose ``report.json`` exists, is not run
again; the others go to a process pool (a run that starts from another run of the plan
waits for it). Each finished run appends ONE public row (``public_row``; its fields and
what it never holds: docs/PRIVACY.md, "Experiment exports") to ``docs/data/NAME.jsonl``.
A study's ``plan(rows)`` may grow as rows arrive (``choose_then_test``: the test seeds of
what the validation runs chose), so the runner plans again until nothing is left.

Renderer: the marked sections ``<!-- BEGIN name -->`` ... ``<!-- END name -->`` of the
study's pages (``replace_section``); text outside the markers is never touched. Paths in a
study's configs (the dataset, an init run) are relative to the work folder, so keys do not
depend on where it is.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT / "src"), str(HERE)]

from dpemb.training.config import NAMED_INITS, flat_settings  # noqa: E402
from dpemb.training.run_config import PerformanceFlags, TrainConfig, changed_settings  # noqa: E402

METRIC = "recall_at_far_0.001"  # the metric tables show unless told otherwise
#: report.json's held-out metrics that a row keeps (what the release reports on held-out users)
RELEASED_METRICS = ("recall_at_far_0.0001", "recall_at_far_0.001", "recall_at_far_0.01", "map_at_r",
                    "precision_at_1", "roc_auc")
#: report.json's privacy fields that a row keeps: the spec, the epsilons and their statements
RELEASED_PRIVACY = ("spec", "noise_seeded", "noise_sampler", "rounds_composed", "statement", "epsilon_rdp",
                    "epsilon_pld", "statement_rdp", "statement_pld", "extrapolated", "adaptive_clipping")
#: a row's fields (docs/PRIVACY.md, "Experiment exports": the study row)
ROW_FIELDS = ("study", "name", "key", "settings", "metrics", "initial", "privacy")


@dataclass(frozen=True)
class Run:
    """One run of a study: a name for people, a configuration for the runner."""

    name: str
    config: TrainConfig

    @property
    def key(self) -> str:
        return config_key(self.config)


def config_key(config: TrainConfig) -> str:
    """A hash of the configuration: of its ``to_dict`` entries that differ from
    ``TrainConfig()``'s (``settings_of``; the seed included), so equal configs get equal
    keys and a setting added to TrainConfig later, at a default, changes no key. (A study
    names the knobs it depends on, so that a changed default changes its keys.)"""
    text = json.dumps(settings_of(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_dir(run: Run) -> str:
    """The run's folder relative to the work folder: what a later run's ``model.init`` names."""
    return f"runs/{run.key}"


DEFAULTS = flat_settings(TrainConfig().to_dict())


def settings_of(config: TrainConfig) -> dict[str, Any]:
    """The dotted settings where ``config`` differs from ``TrainConfig()``."""
    return changed_settings(TrainConfig(), config)


def setting(row: dict[str, Any], path: str) -> Any:
    """A row's value of the dotted setting ``path`` (the default where the row does not name it)."""
    return row["settings"].get(path, DEFAULTS.get(path))


def public_row(study: str, run: Run, report: dict[str, Any]) -> dict[str, Any]:
    """The export's row of a finished run: only what its release holds."""
    privacy = report.get("privacy")
    return {"study": study, "name": run.name, "key": run.key, "settings": settings_of(run.config),
            "metrics": {k: v for k, v in report["final"].items() if k in RELEASED_METRICS},
            "initial": {k: v for k, v in (report.get("initial") or {}).items() if k in RELEASED_METRICS},
            "privacy": ({k: v for k, v in privacy.items() if k in RELEASED_PRIVACY}
                        if isinstance(privacy, dict) else privacy)}


def load_rows(export: Path) -> list[dict[str, Any]]:
    """The export's rows (the last row of a key wins); [] without an export."""
    lines = Path(export).read_text().splitlines() if Path(export).exists() else []
    rows = (json.loads(line) for line in lines if line.strip())
    return list({row["key"]: row for row in rows}.values())


def append_row(export: Path, row: dict[str, Any]) -> None:
    Path(export).parent.mkdir(parents=True, exist_ok=True)
    with open(export, "a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


# ------------------------------------------------------------------------------ the runner
def _resolved(config: TrainConfig, work: Path) -> TrainConfig:
    """``config`` with its dataset and init paths under ``work``."""
    data = config.data.path and str(work / config.data.path)
    init = config.model.init
    init = init if init in NAMED_INITS or Path(init).is_absolute() else str(work / init)
    return replace(config, data=replace(config.data, path=data), model=replace(config.model, init=init))


def train_one(config: dict[str, Any], work: str, perf: PerformanceFlags) -> dict[str, Any]:
    """Train one run (``TrainConfig.to_dict()``) into its folder; returns its report."""
    from dpemb.training.runner import train

    cfg = TrainConfig.from_dict(config)
    out = Path(work) / "runs" / config_key(cfg)
    train(_resolved(cfg, Path(work)), str(out), perf=perf, resume="auto")
    return json.loads((out / "report.json").read_text())


def execute(study: str, runs: list[Run], work: Path, export: Path, jobs: int,
            perf: PerformanceFlags) -> None:
    """Train ``runs`` (``jobs`` processes; 0: in this process), appending each finished
    run's row to ``export``; a run starts once the run its ``model.init`` names has
    finished, and not at all if that one failed."""
    todo, pending, failed = {r.key: r for r in runs}, {}, set()
    pool = ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) if jobs > 0 else None

    def record(r: Run, report: Callable[[], dict[str, Any]]) -> None:
        try:
            rep = report()
        except Exception:  # record the failure, keep going
            print(f"  FAILED {r.name}:\n{traceback.format_exc()}", flush=True)
            failed.add(r.key)
            return
        append_row(export, public_row(study, r, rep))
        print(f"  done {r.name}: {METRIC} {rep['final'][METRIC]:.3f}", flush=True)

    try:
        while todo or pending:
            busy = set(todo) | {r.key for r in pending.values()} | failed
            ready = [r for r in todo.values() if r.config.model.init.removeprefix("runs/") not in busy]
            for r in ready[:max(1, jobs) - len(pending)]:
                del todo[r.key]
                print(f"  run {r.name} ({r.key})", flush=True)
                args = (r.config.to_dict(), str(work), perf)
                if pool:
                    pending[pool.submit(train_one, *args)] = r
                else:
                    record(r, lambda: train_one(*args))
            if pool and pending:
                for f in wait(pending, return_when=FIRST_COMPLETED)[0]:
                    record(pending.pop(f), f.result)
            elif not ready:  # what is left waits for a run that failed
                print(f"  not run: {', '.join(r.name for r in todo.values())} (their init run failed)")
                break
    finally:
        if pool:
            pool.shutdown(wait=True, cancel_futures=True)


def run_study(study: Any, work: Path, jobs: int = 1, perf: PerformanceFlags = PerformanceFlags(progress=False),
              export: Path | None = None, train: bool = True) -> list[dict[str, Any]]:
    """Run what the study's plan lacks (planning again as rows arrive: the test seeds of a
    choice); returns the rows. ``train=False``: export the runs finished on disk (e.g.
    trained by `dpemb train` elsewhere), train nothing, and say how many are missing."""
    export = export or ROOT / "docs" / "data" / f"{study.NAME}.jsonl"
    if perf.threads == 0:
        perf = replace(perf, threads=max(1, (os.cpu_count() or 1) // max(1, jobs)))
    if train:
        study.prepare(work)
    tried: set[str] = set()  # a run that failed is tried once per call
    while True:
        rows = load_rows(export)
        done = {r["key"] for r in rows}
        todo, exported = [], False
        for run in study.plan(rows):
            report = work / "runs" / run.key / "report.json"
            if run.key in done | tried or run.key in {r.key for r in todo}:
                continue
            if report.exists():  # finished, its row not yet exported
                append_row(export, public_row(study.NAME, run, json.loads(report.read_text())))
                done.add(run.key)
                exported = True
            else:
                todo.append(run)
        if exported:  # the new rows may complete a choice: plan again
            continue
        if not todo:
            return load_rows(export)
        if not train:
            print(f"{study.NAME}: {len(todo)} runs of the plan not trained (--no-train): "
                  + ", ".join(r.name for r in todo))
            return load_rows(export)
        print(f"{study.NAME}: {len(todo)} runs to train on {max(1, jobs)} process(es)", flush=True)
        tried |= {r.key for r in todo}
        execute(study.NAME, todo, work, export, jobs, perf)


# ------------------------------------------------------------------------------ choosing
def choose(rows: list[dict[str, Any]], candidates: dict[Any, Run], metric: str = METRIC) -> Any:
    """The candidate whose (validation) run scored best, the first on a tie; None until
    every candidate has its row."""
    by_key = {r["key"]: r for r in rows}
    if any(c.key not in by_key for c in candidates.values()):
        return None
    return max(candidates, key=lambda c: (by_key[candidates[c].key]["metrics"][metric],
                                          -list(candidates).index(c)))


def choose_then_test(rows: list[dict[str, Any]], candidates: dict[Any, Run],
                     tests: Callable[[Any], list[Run]], metric: str = METRIC) -> list[Run]:
    """Choose on validation, then test seeds: the candidates' validation runs, and the test
    runs of the chosen one once every validation run has finished (``tests(chosen)``)."""
    chosen = choose(rows, candidates, metric)
    return [*candidates.values(), *(tests(chosen) if chosen is not None else [])]


# ------------------------------------------------------------------------------ the renderer
def select(rows: Iterable[dict[str, Any]], **where: Any) -> list[dict[str, Any]]:
    """The rows whose settings (``__`` for ``.`` in the path) equal every value given."""
    want = {k.replace("__", "."): v for k, v in where.items()}
    return [r for r in rows if all(setting(r, k) == v for k, v in want.items())]


def group(rows: Iterable[dict[str, Any]], by: tuple[str, ...]) -> dict[tuple, list[dict[str, Any]]]:
    """Rows grouped by the dotted settings ``by``, in the order groups first appear."""
    out: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(setting(r, p) for p in by), []).append(r)
    return out


def stats(rows: list[dict[str, Any]], metric: str = METRIC) -> tuple[float, float, int]:
    """(mean, sample std, n) of ``metric`` over rows (std nan for one row)."""
    xs = [r["metrics"][metric] for r in rows]
    if not xs:
        return math.nan, math.nan, 0
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else math.nan
    return m, s, len(xs)


def mean_std(rows: list[dict[str, Any]], metric: str = METRIC, nd: int = 3) -> str:
    """'0.922 ± 0.005 [3]' ('0.949 [1]' for one run, '-' for none)."""
    m, s, n = stats(rows, metric)
    return "-" if n == 0 else f"{m:.{nd}f}" + (f" ± {s:.{nd}f}" if n > 1 else "") + f" [{n}]"


def by_seed(rows: list[dict[str, Any]], metric: str = METRIC, nd: int = 3) -> str:
    """Each run's value, in seed order: '0.945, 0.963, 0.948'."""
    return ", ".join(f"{r['metrics'][metric]:.{nd}f}" for r in sorted(rows, key=lambda r: setting(r, "seed")))


def table(header: list[str], lines: Iterable[Iterable[Any]]) -> str:
    """A markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(str(c) for c in ln) + " |" for ln in lines])


MARKED = re.compile(r"(<!-- BEGIN (\S+) -->\n)(.*?)(<!-- END \2 -->)", re.S)


def marked_sections(text: str) -> dict[str, str]:
    """The marked sections of a page: name -> the text between its markers (stripped)."""
    return {m.group(2): m.group(3).strip() for m in MARKED.finditer(text)}


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with the section ``name`` between its markers replaced by ``body`` (KeyError
    when the page has no such section: a page's layout is written by hand)."""
    if name not in marked_sections(text):
        raise KeyError(f"no section <!-- BEGIN {name} --> in the page")
    return MARKED.sub(lambda m: m.group(0) if m.group(2) != name else f"{m.group(1)}{body.strip()}\n{m.group(4)}",
                      text)


def render(study: Any, rows: list[dict[str, Any]]) -> list[Path]:
    """Write every page's marked sections from the rows (and the study's figures); returns the pages."""
    from dpemb.atomic import atomic_write_text

    sections = study.sections(rows)
    for page in study.PAGES:
        text = page.read_text()
        for name in marked_sections(text):
            if name in sections:
                text = replace_section(text, name, sections[name])
        atomic_write_text(page, text)
    if hasattr(study, "figures"):
        study.figures(rows, ROOT / "docs" / "img")
    return list(study.PAGES)


def bar_plot(path: Path, bars: dict[str, tuple[float, float, int]], title: str,
             reference: tuple[str, tuple[float, float, int]] | None = None, ylabel: str = "Recall@FAR=1e-3") -> Path:
    """Bars of mean ± std (``stats``) per label, and a reference's mean and band."""
    with figure(path, title, ylabel) as ax:
        xs = range(len(bars))
        vals = list(bars.values())
        ax.bar(xs, [v[0] for v in vals], yerr=[v[1] if v[2] > 1 else 0 for v in vals], capsize=6,
               alpha=0.8)
        if reference:
            (label, (m, s, n)) = reference
            ax.axhline(m, color="black", label=label)
            if n > 1:
                ax.axhspan(m - s, m + s, color="gray", alpha=0.2)
            ax.legend(fontsize=8, loc="upper center")
        ax.set_xticks(list(xs), list(bars), fontsize=8)
        low = min(v[0] for v in vals) - 0.1
        if reference:  # a reference below the bars shows too
            low = min(low, reference[1][0] - 0.05)
        ax.set_ylim(max(0.0, low), 1.02)
        ax.grid(axis="y", alpha=0.3)
    return path


@contextmanager
def figure(path: Path, title: str, ylabel: str) -> Iterator[Any]:
    """The axes of a 6.4 x 4 in figure, titled and saved to ``path`` (120 dpi) at the end."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    yield ax
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", help="a module of experiments/studies/ (e.g. long)")
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "studies", help="run folders and data")
    ap.add_argument("--jobs", type=int, default=1, help="training processes (0: in this process)")
    ap.add_argument("--render-only", action="store_true", help="rewrite the pages from the export, run nothing")
    ap.add_argument("--no-train", action="store_true",
                    help="export the runs finished under --work and render; train none of the missing ones")
    for flag in ("threads", "device", "client_batch"):
        default = getattr(PerformanceFlags(), flag)
        ap.add_argument("--" + flag.replace("_", "-"), type=type(default), default=default,
                        help=f"performance only (default {default})")
    args = ap.parse_args(argv)
    study = importlib.import_module(f"studies.{args.study}")
    export = ROOT / "docs" / "data" / f"{study.NAME}.jsonl"
    perf = PerformanceFlags(threads=args.threads, device=args.device, client_batch=args.client_batch, progress=False)
    rows = load_rows(export) if args.render_only else run_study(study, args.work.resolve(), args.jobs, perf,
                                                                 train=not args.no_train)
    for page in render(study, rows):
        print(f"wrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
