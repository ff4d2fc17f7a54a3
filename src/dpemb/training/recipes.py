"""Recipes: measured run configurations shipped with dpemb (``dpemb recipes``,
``dpemb train --recipe NAME``).

A recipe is a TOML file in ``dpemb/recipes/``: a ``TrainConfig`` (itself a valid
``--config``) plus a ``[recipe]`` table that says what it is (the fields: docs/RECIPES.md).
Every number in a recipe comes from a page of docs/; what was not measured says
"not measured". The rules ``dpemb train --recipe`` applies (``check_recipe_run``):
docs/RECIPES.md, "The rules of `--recipe`".
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from importlib import resources
from typing import Any

from dpemb.training.run_config import ConfigError, TrainConfig, changed_settings

#: what ``not measured`` is spelled as in a recipe
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Result:
    """One result a recipe reproduces: ``value`` is "mean ± std [n seeds]" as the page
    states it (or one seed's score), ``ci`` the confidence interval over test identities
    (or ``NOT_MEASURED``), ``source`` the docs page and section."""

    data: str  # on which dataset (e.g. the recipe's data command, or "basic fonts")
    metric: str
    split: str
    value: str
    seeds: int
    ci: str
    source: str

    def line(self) -> str:
        """One line: metric, split, value, seeds."""
        return f"{self.metric} on {self.split}: {self.value} [{self.seeds} seed{'s' * (self.seeds != 1)}]"


@dataclass(frozen=True)
class RecipeInfo:
    """The ``[recipe]`` table of a recipe file (see the module docstring)."""

    name: str
    description: str
    data_command: str  # makes the dataset the recipe's results were measured on
    data_dir: str  # the --out of data_command (the --data of the run)
    time_2cores: str  # the measured time of one run on 2 cores, or NOT_MEASURED
    time_basis: str  # what the time figure is based on
    reproduces: tuple[Result, ...]
    population: int | None = None  # training users of data_command's dataset (None: not federated)
    init_recipe: str | None = None  # the recipe whose run directory is this one's --init
    experiment: str | None = None  # the script that measured it
    extrapolates: bool = False  # epsilon stated at a population other than its data's (target_population)
    notes: tuple[str, ...] = ()


_REQUIRED = {"name", "description", "data_command", "data_dir", "time_2cores", "time_basis", "reproduces",
             "extrapolates"}
_RECIPE_KEYS = _REQUIRED | {"population", "init_recipe", "experiment", "notes"}
_RESULT_KEYS = {"data", "metric", "split", "value", "seeds", "ci", "source"}


def list_recipes() -> list[str]:
    """The names of the shipped recipes, sorted."""
    return sorted(p.name[:-5] for p in resources.files("dpemb.recipes").iterdir() if p.name.endswith(".toml"))


def recipe_text(name: str) -> str:
    """The recipe file's text; ConfigError naming the recipes when there is none by that name."""
    path = resources.files("dpemb.recipes") / f"{name}.toml"
    if not path.is_file():
        raise ConfigError(f"no such recipe {name!r}; the recipes are: {', '.join(list_recipes())} "
                          "(`dpemb recipes` lists them)")
    return path.read_text()


def load_recipe(name: str) -> tuple[TrainConfig, RecipeInfo]:
    """The recipe ``name``: its TrainConfig and its RecipeInfo. ConfigError for an unknown
    name or a malformed file (unknown or missing keys are refused)."""
    try:
        data = tomllib.loads(recipe_text(name))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"recipe {name}: not valid TOML ({e})") from e
    table = data.pop("recipe", None)
    if not isinstance(table, dict):
        raise ConfigError(f"recipe {name}: no [recipe] table")
    try:
        config = TrainConfig.from_dict(data)
    except ConfigError as e:
        raise ConfigError(f"recipe {name}: {e}") from e
    return config, _info(name, table, config)


def _info(name: str, table: dict[str, Any], config: TrainConfig) -> RecipeInfo:
    unknown = sorted(set(table) - _RECIPE_KEYS)
    missing = sorted(_REQUIRED - set(table))
    if unknown or missing:
        raise ConfigError(f"recipe {name}: [recipe] " + (f"has unknown keys {unknown}" if unknown else
                                                         f"lacks {missing}"))
    if table["name"] != name:
        raise ConfigError(f"recipe {name}: its [recipe] name is {table['name']!r}")
    results = []
    for r in table["reproduces"]:
        if set(r) != _RESULT_KEYS:
            raise ConfigError(f"recipe {name}: each [[recipe.reproduces]] has exactly {sorted(_RESULT_KEYS)}")
        results.append(Result(**r))
    extrapolates = config.federated_run and config.privacy.target_population is not None
    if table["extrapolates"] != extrapolates:
        raise ConfigError(f"recipe {name}: [recipe] extrapolates = {table['extrapolates']}, but its privacy "
                          f"request {'sets' if extrapolates else 'sets no'} target_population")
    if extrapolates and table.get("population") is None:
        raise ConfigError(f"recipe {name}: an extrapolating recipe states the population of its data")
    return RecipeInfo(**{**table, "reproduces": tuple(results), "notes": tuple(table.get("notes", ()))})


def run_command(info: RecipeInfo, out: str | None = None) -> list[str]:
    """The command lines that run the recipe from nothing: its data, the public pretraining
    it starts from (and the one that starts from, and so on), itself."""
    chain = [info]
    while chain[-1].init_recipe:
        chain.append(load_recipe(chain[-1].init_recipe)[1])
    lines, init = [info.data_command], ""
    for step in reversed(chain):
        dest = out if step is info and out else f"runs/{step.name}"
        lines.append(f"dpemb train --recipe {step.name} --data {info.data_dir}{init} --out {dest}")
        init = f" --init runs/{step.name}"
    return lines


def check_recipe_run(config: TrainConfig, info: RecipeInfo, given: set[str]) -> TrainConfig:
    """The configuration a ``--recipe`` run trains (``config``: the recipe with the flags
    over it; ``given``: the dotted settings the flags set), after the recipe's rules (the
    module docstring); ConfigError naming the fix when a rule refuses it. A flag that
    chooses another kind of privacy request (``--noise-multiplier``, ``--non-private``)
    replaces the recipe's target epsilon, its population with it."""
    r = config.privacy
    if {"privacy.noise_multiplier", "privacy.nonprivate"} & given and "privacy.target_epsilon" not in given:
        r = replace(r, target_epsilon=None,
                    target_population=r.target_population if "privacy.target_population" in given else None)
        config = replace(config, privacy=r)
    if info.init_recipe and "model.init" not in given:
        _, pre = load_recipe(info.init_recipe)
        raise ConfigError(
            f"--recipe {info.name} starts from a public pretraining, as its result was measured: make it with "
            f"`dpemb train --recipe {pre.name} --data DIR --out runs/{pre.name}` and give --init runs/{pre.name} "
            "(or --init random to train from scratch, which the recipe's result does not cover)")
    if r.target_population is None or "privacy.target_population" in given or not config.federated_run:
        return config
    from dpemb.training.runner import training_users

    population = training_users(config)
    if population is not None and population != info.population:
        raise ConfigError(
            f"--recipe {info.name} states its epsilon ({r.target_epsilon:g}) for the run EXTRAPOLATED to "
            f"{r.target_population:,} users from its data's {info.population:,} training users (the paper's "
            f"convention: noise multiplier and clients per round scaled together), but {config.data.path} trains "
            f"{population:,} users. Give --target-population {r.target_population} to accept that extrapolation "
            f"from your {population:,} users (both epsilons are printed: the one at {r.target_population:,} users "
            f"and this run's own), or --target-population N for another N; or make the recipe's own data "
            f"({info.data_command}). To calibrate at your own population instead, save the recipe "
            f"(`dpemb recipes {info.name} --toml > mine.toml`), delete its target_population and run "
            "--config mine.toml")
    return config


def describe_run(name: str, config: TrainConfig) -> str:
    """What ``dpemb train --recipe`` says before training: the recipe, the result it was
    measured to give, and the settings the flags changed (which that result does not cover)."""
    recipe, info = load_recipe(name)
    lines = [f"recipe {name}: {info.description}"]
    lines += [f"  measured: {r.line()} ({r.source})" for r in info.reproduces]
    changed = [(k, v) for k, v in changed_settings(recipe, config).items() if k not in ("data.path", "model.init")]
    if info.init_recipe and config.model.init == "random":
        lines.append("  --init random: trains from scratch; the measured result started from the public "
                     f"pretraining of recipe {info.init_recipe}")
    if changed:
        lines.append("  changed by flags (the measured result does not cover them): "
                     + ", ".join(f"{k} = {v!r}" for k, v in changed))
    return "\n".join(lines)
