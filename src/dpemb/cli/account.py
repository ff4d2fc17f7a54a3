"""`dpemb account`: what-if privacy accounting for user-level DP federated training.

Answers: what epsilon does this configuration give (RDP and PLD accountants)? what
noise multiplier reaches a target epsilon? how many rounds fit in a budget? what is
the epsilon of the same run scaled to a larger population (the paper's "noise z x k"
extrapolation)? Any of --population, --clients-per-round, --users-per-client,
--rounds, --noise-multiplier, --delta, --target-epsilon, --extrapolate-to,
--epsilon-budget and --bands takes a comma-separated list; a list sweeps all
combinations and prints a table. Every epsilon printed names its accountant, delta, unit of privacy
and neighbouring relation.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import sys
from typing import Any, Callable

from dpemb.cli.common import UsageError, add_shared, check_config_dataset, usage_errors
from dpemb.privacy.delta import DEFAULT_DELTA_RULE
from dpemb.privacy.spec import ACCOUNTANTS, CYCLIC, MECHANISMS, SAMPLINGS
from dpemb.training.run_config import PrivacyRequest

#: the defaults of `dpemb train` (one set: dpemb.training.run_config)
DEFAULT = PrivacyRequest()
MAX_PLOT_ROWS = 8


def _list_of(kind: Callable[[str], Any], name: str) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        items = [s.strip().replace("_", "") for s in text.split(",")]
        if not items or any(not s for s in items):
            raise argparse.ArgumentTypeError(f"{name}: expected a number or a comma-separated list, got {text!r}")
        try:
            return [kind(s) for s in items]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name}: {text!r} is not a {'whole number' if kind is _int else 'number'} "
                "(or comma-separated list of them)"
            ) from None

    return parse


def _int(text: str) -> int:
    value = float(text)
    if not value.is_integer():
        raise ValueError(text)
    return int(value)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "account",
        help="what-if privacy accounting (epsilon, calibration, extrapolation)",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--config", metavar="FILE",
                   help="a run configuration (`dpemb train --config`, or a run's private/config.json): its privacy "
                        "request, cohort and extrapolation populations, and its dataset's training users as N; flags "
                        "given here override it")
    p.add_argument("--population", type=_list_of(_int, "--population"), default=None,
                   help="N: users in the population (comma list sweeps); required unless --config names a dataset")
    p.add_argument("--clients-per-round", type=_list_of(_int, "--clients-per-round"),
                   default=[DEFAULT.clients_per_round], help="M: virtual clients per round (dpemb train's default)")
    p.add_argument("--users-per-client", type=_list_of(_int, "--users-per-client"), default=[DEFAULT.users_per_client],
                   help="K: users per virtual client (K > 1 doubles the add/remove sensitivity)")
    p.add_argument("--rounds", type=_list_of(_int, "--rounds"), default=[DEFAULT.rounds],
                   help="T: training rounds (dpemb train's default)")
    add_shared(p, "--noise-multiplier", "the clipped sum",
               type=_list_of(float, "--noise-multiplier"), default=None)
    add_shared(p, "--target-epsilon", "", type=_list_of(float, "--target-epsilon"), default=None)
    add_shared(p, "--target-population", " (comma list sweeps)", type=_list_of(_int, "--target-population"),
               default=None, metavar="N")
    add_shared(p, "--delta", "users in the population", type=_list_of(float, "--delta"),
               default=None)
    add_shared(p, "--allow-large-delta", "; the output warns", action="store_true")
    p.add_argument("--clip-norm", type=float, default=DEFAULT.clip_norm,
                   help="C (does not change epsilon; sets the printed noise std)")
    add_shared(p, "--sampling", choices=SAMPLINGS, default=None)
    add_shared(p, "--mechanism", "", choices=MECHANISMS, default="gaussian")
    add_shared(p, "--bands", type=_list_of(_int, "--bands"), default=None, metavar="B")
    p.add_argument("--relation", choices=("add-remove", "replace-one", "replace-special"), default=None,
                   help="neighbouring relation (default: the one the sampling is accounted under)")
    add_shared(p, "--tree-restarts", action="store_true")
    p.add_argument("--unit", choices=("user", "example"), default="user", help="unit of privacy")
    p.add_argument("--accountant", choices=(*ACCOUNTANTS, "both"), default="both",
                   help="the accountants stated; --target-epsilon and --epsilon-budget use this one, or with "
                        "both the one --config names (else the one dpemb train calibrates with)")
    p.add_argument("--epsilon-budget", type=_list_of(float, "--epsilon-budget"), default=None,
                   help="also print the most rounds whose epsilon stays within this budget")
    p.add_argument("--extrapolate-to", type=_list_of(_int, "--extrapolate-to"), default=None,
                   metavar="N", help="epsilon at N users with z and M scaled by N/population")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--plot", metavar="FILE", default=None, help="plot epsilon against rounds to FILE")
    p.set_defaults(func=run)
    _DEFAULTS.update({a.dest: a.default for a in p._actions})


#: the parser's default objects: a flag whose value IS its default object was not given
_DEFAULTS: dict[str, Any] = {}


def apply_config(args: argparse.Namespace) -> None:
    """Fill the flags not given from ``--config`` (a ``TrainConfig``): the same privacy
    request, cohort and populations ``dpemb train --config`` would run."""
    from dpemb.training.run_config import ConfigError, load_config

    with usage_errors(ConfigError):
        config = load_config(args.config)
    r = config.privacy

    def fill(dest: str, value: Any) -> None:
        if getattr(args, dest) is _DEFAULTS.get(dest) and value is not None:
            setattr(args, dest, value)

    def fill_list(*dests: str) -> None:  # a list flag: the config's one value, if it has one
        for dest in dests:
            fill(dest, None if getattr(r, dest) is None else [getattr(r, dest)])

    if args.population is None and config.data.path is not None:
        from dpemb.training.runner import training_users

        check_config_dataset(config, args.config, "give --population N")
        args.population = [training_users(config) + (r.audit_canaries or 0)]
    if args.noise_multiplier is None and args.target_epsilon is None:
        if r.nonprivate:
            raise UsageError(f"--config {args.config} is a non-private run: there is no epsilon to account")
        fill_list("noise_multiplier", "target_epsilon")
    if args.noise_multiplier is None:  # calibrated as the run would be: at N' users when it names them
        fill_list("target_population")
    args.config_accountant = r.accountant
    fill_list("clients_per_round", "users_per_client", "rounds", "delta", "epsilon_budget")
    fill("clip_norm", r.clip_norm)
    fill("sampling", r.sampling)
    fill("mechanism", r.mechanism if r.mechanism is not None else
         "tree" if config.algorithm == "dp-ftrl-fedemb" else None)
    fill("bands", None if r.bands == 1 else [r.bands])
    for switch in ("tree_restarts", "allow_large_delta"):  # on where the config turns it on
        if getattr(r, switch):
            setattr(args, switch, True)
    fill("extrapolate_to", [n for n in (*r.report_populations, r.target_population) if n] or None)


# ---------------------------------------------------------------------------- computing
def _accountants(choice: str) -> tuple[str, ...]:
    return ACCOUNTANTS if choice == "both" else (choice,)


def _calibration_accountant(args: argparse.Namespace) -> str:
    """The accountant that calibrates and bounds the rounds: --accountant's one, or with
    both, the --config's (what `dpemb train` calibrates with), or train's default."""
    if args.accountant in ACCOUNTANTS:
        return args.accountant
    return getattr(args, "config_accountant", None) or DEFAULT.accountant


def _spec_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    if args.bands is not None and args.mechanism not in CYCLIC:
        raise UsageError(f"--bands applies to --mechanism bandmf or blt (b, their participation separation), "
                         f"not to --mechanism {args.mechanism}; add --mechanism bandmf or blt, or drop --bands")
    return {k: getattr(args, k) for k in ("clip_norm", "sampling", "mechanism", "relation", "unit",
                                          "tree_restarts", "allow_large_delta")}


def _combinations(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every combination of the list flags' values (a flag not given: None; --bands: 1)."""
    lists = {k: getattr(args, k) or [None] for k in (
        "population", "clients_per_round", "users_per_client", "rounds", "noise_multiplier",
        "target_epsilon", "target_population", "delta", "extrapolate_to", "epsilon_budget")}
    lists["bands"] = args.bands or [1]
    return [dict(zip(lists, values)) for values in itertools.product(*lists.values())]


PREFIX_NOISE = ("the std the noise of rounds 1..t adds to the sum of their averaged updates, RMS over t: "
                "z x sensitivity / M x strategy.prefix_noise_rms; what SGD on the released averages adds to the model "
                "before the learning rate; lower is better at equal epsilon")


def _epsilons(spec: Any, accountants: tuple[str, ...]) -> dict[str, Any]:
    from dpemb.privacy import describe_epsilon, describe_schedule, epsilon_for, supported_accountants
    from dpemb.privacy.advice import PLD_MAX_RDP_EPSILON

    out: dict[str, Any] = {}
    for acc in ACCOUNTANTS:
        out[f"epsilon_{acc}"] = None
        if acc not in accountants:
            continue
        if acc not in supported_accountants(spec):
            out[f"note_{acc}"] = f"{acc.upper()} not available for {spec.sampling} sampling"
            continue
        if acc == "pld" and not spec.nonprivate and epsilon_for(spec, "rdp") > PLD_MAX_RDP_EPSILON:
            out["note_pld"] = (f"not computed: the RDP epsilon {epsilon_for(spec, 'rdp'):.3g} exceeds "
                               f"{PLD_MAX_RDP_EPSILON:g}, a vacuous guarantee (PLD's cost grows like 1/z^2)")
            continue
        eps = epsilon_for(spec, acc)
        out[f"epsilon_{acc}"] = None if math.isinf(eps) else eps
        out[f"statement_{acc}"] = describe_epsilon(
            eps, accountant=acc, delta=spec.resolved_delta, unit=spec.unit, relation=spec.relation,
            schedule=describe_schedule(spec),
        )
    return out


def compute_row(combo: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One configuration: epsilon(s), calibration, budget, extrapolation, warnings."""
    from dpemb.privacy import (PrivacySpec, calibrate_extrapolated, calibrate_noise_multiplier, cohort_warnings,
                               describe_mechanism, extrapolate, max_rounds)
    from dpemb.privacy.strategy import model_noise

    accountants = _accountants(args.accountant)
    acc = _calibration_accountant(args)
    z = combo["noise_multiplier"]
    target, target_n = combo["target_epsilon"], combo["target_population"]
    with usage_errors():  # invalid spec values, calibration failures
        spec = PrivacySpec(
            **{k: combo[k] for k in ("population", "clients_per_round", "users_per_client",
                                     "rounds", "delta", "bands")},
            noise_multiplier=1.0 if z is None else z, **_spec_kwargs(args))
        if acc == "pld" and spec.sampling == "fixed":
            raise UsageError("the PLD accountant does not support fixed-size sampling; use --accountant rdp")
        if target is not None:
            if not (0 < target < math.inf):
                raise UsageError(f"--target-epsilon must be positive and finite, got {target}")
            if target_n is None:
                spec = dataclasses.replace(spec, noise_multiplier=calibrate_noise_multiplier(spec, target, acc))
            else:  # as `dpemb train --target-population` calibrates
                spec = calibrate_extrapolated(spec, target, target_n, acc)
        row: dict[str, Any] = {
            "population": spec.population, "clients_per_round": spec.clients_per_round,
            "users_per_client": spec.users_per_client, "rounds": spec.rounds,
            "noise_multiplier": spec.noise_multiplier, "calibrated": target is not None,
            "target_epsilon": target, "target_population": target_n,
            "calibrated_with": (acc if target is not None else None),
            "delta": spec.resolved_delta, "delta_is_default": spec.delta is None,
            "sampling": spec.sampling, "mechanism": spec.mechanism, "relation": spec.relation.value,
            "unit": spec.unit, "tree_restarts": spec.tree_restarts,
            "sampling_rate": spec.sampling_rate, "clip_norm": spec.clip_norm,
            "sensitivity": spec.sensitivity, "noise_std": spec.noise_std,
            "noise_on_average": spec.noise_on_average, "mechanism_description": describe_mechanism(spec),
        }
        if spec.mechanism == "tree" or spec.sampling == "epoch":
            row["rounds_per_epoch"] = spec.rounds_per_epoch
        if spec.mechanism in CYCLIC:
            row["bands"] = spec.bands
            row["participations"] = math.ceil(spec.rounds / spec.bands)
            row["prefix_noise"] = model_noise(spec)
        row.update(_epsilons(spec, accountants))
        budget = combo["epsilon_budget"]
        if budget is not None:
            if not (0 < budget < math.inf):
                raise UsageError(f"--epsilon-budget must be positive and finite, got {budget}")
            row["epsilon_budget"] = budget
            row["max_rounds"] = max_rounds(spec, budget, acc)
            row["max_rounds_accountant"] = acc
        extrapolate_to = combo["extrapolate_to"] or target_n
        if extrapolate_to is not None:
            ex = extrapolate(spec, extrapolate_to, "rdp")
            row["extrapolation"] = {
                "population": ex.population, "factor": ex.factor, "noise_multiplier": ex.noise_multiplier,
                "clients_per_round": ex.clients_per_round, "delta": ex.delta, "delta_note": ex.delta_note,
                **_epsilons(ex.spec, accountants),
            }
        eps_for_warning = row.get("epsilon_rdp") if row.get("epsilon_rdp") is not None else row.get("epsilon_pld")
        row["warnings"] = cohort_warnings(spec, eps_for_warning)
        row["_spec"] = spec
        return row


# ---------------------------------------------------------------------------- output
def _eps_text(x: Any) -> str:
    if x is None:
        return "n/a"
    return f"{x:.2f}" if x >= 1 else f"{x:#.3g}"


def _z_text(z: float) -> str:
    return f"{z:.4f}" if z < 10 else f"{z:.5g}"


def _print_single(row: dict[str, Any]) -> None:
    if "bands" not in row:
        schedule = f"sampling rate q = M*K/N = {row['sampling_rate']:.4g}"
    else:
        b = row["bands"]
        b_is = f"min-separation b = {b}" if row["mechanism"] == "blt" else f"b = {b} band{'s' if b != 1 else ''}"
        schedule = (f"{b_is}, sampling rate within a group q = b*M*K/N = {row['sampling_rate']:.4g}, at most "
                    f"ceil(T/b) = {row['participations']:,} participations per user")
    print(f"configuration: N = {row['population']:,} {row['unit']}s, M = {row['clients_per_round']:,} "
          f"virtual clients per round x K = {row['users_per_client']}, T = {row['rounds']:,} rounds, {schedule}")
    if "prefix_noise" in row:
        print(f"noise on the model: {row['prefix_noise']:.4g} x C per coordinate ({PREFIX_NOISE})")
    print(f"mechanism: {row['mechanism_description']}")
    if row["calibrated"]:
        at = ("" if row["target_population"] is None else
              f" of this run EXTRAPOLATED to {row['target_population']:,} users (the epsilons below are the run's "
              "own)")
        print(f"calibrated noise multiplier z = {row['noise_multiplier']:.4f} for target epsilon "
              f"{row['target_epsilon']:g} ({row['calibrated_with'].upper()} accountant){at}")
    print(f"delta = {row['delta']:.3g}" + (f" (default: {DEFAULT_DELTA_RULE}, N = population)"
                                           if row["delta_is_default"] else ""))
    for acc in ACCOUNTANTS:
        if row.get(f"statement_{acc}"):
            print(row[f"statement_{acc}"])
        elif row.get(f"note_{acc}"):
            print(f"{acc.upper()}: {row[f'note_{acc}']}")
    if "max_rounds" in row:
        print(f"rounds within epsilon budget {row['epsilon_budget']:g} "
              f"({row['max_rounds_accountant'].upper()} accountant): {row['max_rounds']:,}")
    ex = row.get("extrapolation")
    if ex:
        print(f"extrapolated to N = {ex['population']:,}: scale factor k = {ex['factor']:.6g}, noise "
              f"multiplier {row['noise_multiplier']:g} x {ex['factor']:.6g} = {ex['noise_multiplier']:.6g}, "
              f"{ex['clients_per_round']:,} clients per round (same noise on the average), "
              f"delta = {ex['delta']:.3g} ({ex['delta_note']})")
        for acc in ACCOUNTANTS:
            if ex.get(f"statement_{acc}"):
                print(f"  {ex[f'statement_{acc}']}")


def _print_table(rows: list[dict[str, Any]]) -> None:
    first = rows[0]
    cols: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("N", lambda r: f"{r['population']:,}"),
        ("M", lambda r: f"{r['clients_per_round']:,}"),
        ("K", lambda r: str(r["users_per_client"])),
        ("T", lambda r: f"{r['rounds']:,}"),
        *([("b", lambda r: str(r["bands"]))] if any("bands" in r for r in rows) else []),
        ("z" + (" (calibrated)" if first["calibrated"] else ""), lambda r: _z_text(r["noise_multiplier"])),
        ("delta", lambda r: f"{r['delta']:.3g}"),
    ]
    if any(r["target_epsilon"] is not None for r in rows):
        cols.append(("target eps", lambda r: f"{r['target_epsilon']:g}"))
    if any(r.get("target_population") is not None for r in rows):
        cols.append(("at N'", lambda r: "N" if r["target_population"] is None else f"{r['target_population']:,}"))
    for acc in ACCOUNTANTS:
        if any(f"statement_{acc}" in r or f"note_{acc}" in r for r in rows):
            cols.append((f"eps {acc.upper()}", lambda r, a=acc: _eps_text(r.get(f"epsilon_{a}"))))
    if any("prefix_noise" in r for r in rows):
        cols.append(("model noise", lambda r: f"{r['prefix_noise']:.4g}" if "prefix_noise" in r else "n/a"))
    if any("max_rounds" in r for r in rows):
        cols.append(("budget", lambda r: f"{r['epsilon_budget']:g}"))
        cols.append(("max rounds", lambda r: f"{r['max_rounds']:,}"))
    if any("extrapolation" in r for r in rows):
        cols += [
            ("N'", lambda r: f"{r['extrapolation']['population']:,}"),
            ("k", lambda r: f"{r['extrapolation']['factor']:.4g}"),
            ("z'", lambda r: _z_text(r["extrapolation"]["noise_multiplier"])),
            ("M'", lambda r: f"{r['extrapolation']['clients_per_round']:,}"),
        ]
        for acc in ACCOUNTANTS:
            if any(f"statement_{acc}" in r["extrapolation"] for r in rows):
                cols.append((f"eps' {acc.upper()}",
                             lambda r, a=acc: _eps_text(r["extrapolation"].get(f"epsilon_{a}"))))
    cells = [[fmt(r) for _, fmt in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _) in enumerate(cols)]
    print("  ".join(h.rjust(w) for (h, _), w in zip(cols, widths)))
    for c in cells:
        print("  ".join(x.rjust(w) for x, w in zip(c, widths)))
    rel = first["relation"]
    ext = ""
    if any("extrapolation" in r for r in rows):
        notes = sorted({r["extrapolation"]["delta_note"] for r in rows})
        ext = f" (eps' at the extrapolated delta: {'; '.join(notes)})"
    print(f"epsilon: {first['unit']}-level, relation {rel}, delta as listed{ext}; "
          f"mechanism {first['mechanism']}, sampling {first['sampling']}")
    if any("prefix_noise" in r for r in rows):
        best = min((r for r in rows if "prefix_noise" in r), key=lambda r: r["prefix_noise"])
        equal = len({r["target_epsilon"] for r in rows}) == 1 and first["calibrated"]
        print(f"model noise: x C per coordinate, {PREFIX_NOISE}; "
              + (f"lowest: b = {best['bands']}" if equal else "rows at different epsilons: compare them with "
                 "one --target-epsilon"))


def _plot(rows: list[dict[str, Any]], path: str, accountants: tuple[str, ...]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from dpemb.privacy.events import epsilon_curve, supported_accountants
    from dpemb.privacy.relations import describe_relation

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, row in enumerate(rows):
        spec = row["_spec"]
        label = (f"N={spec.population:,} M={spec.clients_per_round:,} K={spec.users_per_client} "
                 f"z={spec.noise_multiplier:.3g}")
        for acc in accountants:
            if acc not in supported_accountants(spec):
                continue
            n = 200 if acc == "rdp" else 30
            ts = np.unique(np.geomspace(1, spec.rounds, n).round().astype(int))
            curve = epsilon_curve(spec, acc)
            ax.plot(ts, [curve(int(t)) for t in ts], "-" if acc == "rdp" else "--", color=f"C{i}",
                    label=f"{label} ({acc.upper()})")
    first = rows[0]["_spec"]
    ax.set_xlabel("rounds")
    ax.set_ylabel("epsilon")
    ax.set_title(f"{first.unit}-level epsilon, {describe_relation(first.relation, first.unit)}, "
                 f"delta = {rows[0]['delta']:.3g}" + (" (per row)" if len({r['delta'] for r in rows}) > 1 else ""),
                 fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run(args: argparse.Namespace) -> int:
    if args.config:
        apply_config(args)
    if args.population is None:
        raise UsageError("give --population N (or --config FILE naming a dataset)")
    if (args.noise_multiplier is None) == (args.target_epsilon is None):
        raise UsageError("give exactly one of --noise-multiplier or --target-epsilon")
    if args.target_population is not None and args.target_epsilon is None:
        raise UsageError("--target-population applies to --target-epsilon (the epsilon calibrated for the run "
                         "extrapolated to N users): add --target-epsilon, or drop --target-population")
    combos = _combinations(args)
    if args.plot and len(combos) > MAX_PLOT_ROWS:
        raise UsageError(f"--plot draws at most {MAX_PLOT_ROWS} configurations, the sweep has {len(combos)}")
    rows = [compute_row(c, args) for c in combos]
    for i, row in enumerate(rows):
        for w in row["warnings"]:
            prefix = f"row {i + 1}: " if len(rows) > 1 else ""
            print(f"warning: {prefix}{w}", file=sys.stderr)
    if args.plot:
        _plot(rows, args.plot, _accountants(args.accountant))
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    if args.json:
        out = public[0] if len(public) == 1 else {"rows": public}
        if args.plot:
            out = {**out, "plot": args.plot}
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    if len(rows) == 1:
        _print_single(rows[0])
    else:
        _print_table(rows)
    if args.plot:
        print(f"plot: {args.plot}")
    return 0
