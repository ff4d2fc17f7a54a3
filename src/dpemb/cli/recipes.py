"""`dpemb recipes`: the measured run configurations shipped with dpemb (``dpemb.training.recipes``)."""

from __future__ import annotations

import argparse

from dpemb.cli.common import guarded


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "recipes", help="list the shipped recipes (measured configurations) or show one",
        description=(
            "Without NAME: a table of the recipes: what each reproduces (Recall@FAR on the test split, mean ± std "
            "over seeds), its measured time on 2 cores and the command that makes its data. With NAME: the whole "
            "recipe (results, their sources, notes, settings) and the command lines that run it. Run one with "
            "`dpemb train --recipe NAME --data DIR --out RUN` (flags given beside it override its settings)."
        ),
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="the recipe to show")
    p.add_argument("--toml", action="store_true",
                   help="with NAME: print the recipe file itself (a valid `dpemb train --config` file)")
    p.set_defaults(func=guarded(run, "recipes"))


def run(args: argparse.Namespace) -> int:
    from dpemb.cli.main import UsageError
    from dpemb.training.recipes import list_recipes, load_recipe, recipe_text

    if args.name is None:
        if args.toml:
            raise UsageError("--toml needs a recipe NAME")
        rows = [("NAME", "REPRODUCES (test split)", "TIME ON 2 CORES", "DATA")]
        for name in list_recipes():
            _, info = load_recipe(name)
            rows.append((name, "; ".join(_short(r) for r in info.reproduces), info.time_2cores, info.data_command))
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
        print("\n`dpemb recipes NAME` shows one recipe and the commands that run it.")
        return 0
    if args.toml:
        print(recipe_text(args.name), end="")
        return 0
    config, info = load_recipe(args.name)
    print(describe(args.name, config, info))
    return 0


def _short(result) -> str:
    """'0.908 ± 0.002 [3 seeds]' (the value without its parenthesis)."""
    value = result.value.split(" (")[0]
    if value == "not measured":
        return value
    return f"{value} [{result.seeds} seed{'s' * (result.seeds != 1)}]"


def describe(name: str, config, info) -> str:
    """The whole recipe as ``dpemb recipes NAME`` prints it."""
    from dpemb.training.recipes import load_recipe, recipe_text, run_command

    L = [f"{name}: {info.description}", "", "reproduces:"]
    for r in info.reproduces:
        L += [f"  {r.line()}", f"    data: {r.data}", f"    confidence interval over test identities: {r.ci}",
              f"    source: {r.source}"]
    L += [f"time on 2 cores: {info.time_2cores} ({info.time_basis})"]
    if info.experiment:
        L.append(f"experiment: {info.experiment}")
    p = config.privacy
    if info.extrapolates:
        L.append(f"extrapolates: yes. Epsilon {p.target_epsilon:g} ({p.accountant.upper()}) is stated for the run "
                 f"extrapolated to {p.target_population:,} users from its data's {info.population:,} training users; "
                 "on data with another population it runs only with --target-population given explicitly, and "
                 "prints both epsilons")
    elif config.federated_run and p.target_epsilon is not None:
        L.append(f"extrapolates: no. Epsilon {p.target_epsilon:g} ({p.accountant.upper()}) is calibrated at the "
                 "population the run trains")
    else:
        L.append("extrapolates: no" + ("" if config.federated_run else " (centralized: not private, no epsilon)"))
    if info.init_recipe:
        _, pre = load_recipe(info.init_recipe)
        L.append(f"starts from: the run of recipe {pre.name} ({pre.description}), given as --init")
    if info.notes:
        L += ["notes:", *(f"  - {n}" for n in info.notes)]
    L += ["run it:", *(f"  {c}" for c in run_command(info))]
    settings = recipe_text(name).split("\n[recipe", 1)[0].rstrip()
    L += ["settings (the recipe file without its [recipe] table; flags given to dpemb train override them):",
          *(f"  {ln}" if ln else "" for ln in settings.splitlines())]
    return "\n".join(L)
