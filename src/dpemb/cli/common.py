"""Small helpers shared by the command modules."""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
from typing import Any, Callable, Iterator

from dpemb.data.dataset import DataError


class UsageError(Exception):
    """A bad flag value found after parsing; reported like argparse errors (exit 2).

    Defined here, not in ``main``, so that ``python -m dpemb.cli.main`` (which loads
    ``main`` twice) raises and catches the same class."""


def guarded(fn: Callable[[argparse.Namespace], int], name: str) -> Callable[[argparse.Namespace], int]:
    """Turn expected errors (bad data, bad config values) into one clear line, exit 1."""

    def run(args: argparse.Namespace) -> int:
        from dpemb.training.checkpoint import CheckpointError
        from dpemb.training.errors import PreReleaseError, TrainingDiverged
        from dpemb.training.interrupt import TrainingInterrupted
        from dpemb.training.run_config import ConfigError

        try:
            return fn(args)
        except (DataError, CheckpointError, PreReleaseError, FileNotFoundError, TrainingDiverged) as e:
            print(f"dpemb {name}: error: {e}", file=sys.stderr)
            return 1
        except ConfigError as e:  # a setting that cannot run: reported like a flag error (exit 2)
            raise UsageError(str(e)) from e
        except TrainingInterrupted as e:
            print(f"dpemb {name}: {e}", file=sys.stderr)
            return e.exit_code

    return run


@contextlib.contextmanager
def usage_errors(kind: type[ValueError] = ValueError, prefix: str = "") -> Iterator[None]:
    """Within it, a ``kind`` error is a UsageError (exit 2) with its text after ``prefix``;
    a DataError (bad data, exit 1) passes unchanged."""
    try:
        yield
    except DataError:
        raise
    except kind as e:
        raise UsageError(prefix + str(e)) from e


def add_device_flag(parser: argparse.ArgumentParser | Any) -> None:
    """``--device auto|cpu|cuda|cuda:N`` (performance only; never changes privacy)."""
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N")


def device_from(args: argparse.Namespace):
    """The torch device ``--device`` names; a UsageError when it is unknown or absent."""
    from dpemb.data.tensors import resolve_device

    with usage_errors():
        return resolve_device(args.device)


def add_secure_noise_flag(group: Any, seed_flag: str) -> None:
    """``--secure-noise/--no-secure-noise`` (default: on unless ``seed_flag`` is given)."""
    group.add_argument(
        "--secure-noise", action=argparse.BooleanOptionalAction, default=None,
        help="floating-point-hardened noise sampler (a fresh OS-keyed generator for every draw, each entry "
             "the normalised sum of two Gaussian draws; docs/PRIVACY.md). Default: on, except with "
             f"{seed_flag} (cannot be combined); --no-secure-noise: the plain sampler")


def print_json(obj: Any) -> None:
    print(json.dumps(obj, indent=2, sort_keys=True, default=str))


def fmt(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, float) else str(x)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that shows every option's default: " (default: X)" is appended where the
    help text does not already state one (and the default is a value, not None/False).
    An option whose default lives in a configuration type (``action.config_default``,
    set by ``dpemb.cli.train.bind_defaults``) shows that one."""

    @staticmethod
    def _default(action: argparse.Action) -> Any:
        return getattr(action, "config_default", action.default)

    @classmethod
    def _shows_default(cls, action: argparse.Action) -> bool:
        return bool(action.option_strings) and action.nargs != 0 and \
            cls._default(action) not in (None, False, argparse.SUPPRESS) and action.help != argparse.SUPPRESS

    def _format_action(self, action: argparse.Action) -> str:
        if not action.help and self._shows_default(action):  # an option without help still shows it
            action = copy.copy(action)
            action.help = "default: %(default)s"
        return super()._format_action(action)

    def _expand_help(self, action: argparse.Action) -> str:
        if hasattr(action, "config_default"):
            action = copy.copy(action)
            action.default = action.config_default
        return super()._expand_help(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or "default" in text.lower() or not self._shows_default(action):
            return text
        return text + " (default: %(default)s)"
