"""Small helpers shared by the command modules."""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
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
def usage_errors(kind: type[ValueError] = ValueError) -> Iterator[None]:
    """Within it, a ``kind`` error is a UsageError (exit 2) with its text; a DataError
    (bad data, exit 1) passes unchanged."""
    try:
        yield
    except DataError:
        raise
    except kind as e:
        raise UsageError(str(e)) from e


def add_device_flag(parser: argparse.ArgumentParser | Any) -> None:
    """``--device auto|cpu|cuda|cuda:N`` (performance only; never changes privacy)."""
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA when present, else CPU), cpu, cuda or cuda:N")


def device_from(args: argparse.Namespace):
    """The torch device ``--device`` names; a UsageError when it is unknown or absent."""
    from dpemb.data.tensors import resolve_device

    with usage_errors():
        return resolve_device(args.device)


#: the help of the privacy flags that several commands take (train and audit, account,
#: transfer): one text per meaning, each "{}" filled with what a command says of its own
SHARED_HELP = {
    "--delta": "delta (default: 1/(10 N) for N {}); a delta >= 1/N is refused unless "
               "--allow-large-delta",
    "--allow-large-delta": "accept a --delta >= 1/N (no meaningful guarantee: for comparisons "
                           "only, e.g. with the DP-FedEmb paper's delta = 1/N){}",
    "--noise-multiplier": "z: noise std = z x the sensitivity of {}",
    "--target-epsilon": "calibrate the noise multiplier z for this epsilon{} (instead of "
                        "--noise-multiplier)",
    "--target-population": "calibrate --target-epsilon for this run EXTRAPOLATED to N users (the DP-FedEmb "
                           "paper's convention: noise multiplier and clients per round scaled by N / the real "
                           "population, the same noise on the average); both epsilons are printed, the "
                           "extrapolation labelled{}",
    "--sampling": "user sampling per round: poisson (Gaussian noise's default; accounting is "
                  "exact), fixed = M*K users without replacement (replace-one relation, RDP only), "
                  "epoch (each user at most once per epoch; tree noise's default and only choice) "
                  "or cyclic-poisson (BandMF, BLT: b keyed groups, round t Poisson-samples group t "
                  "mod b; their default and only choice)",
    "--mechanism": "the noise: gaussian (independent per round), tree (tree aggregation, DP-FTRL), "
                   "bandmf (banded matrix-factorization noise with cyclic Poisson participation, "
                   "--bands B) or blt (buffered linear Toeplitz noise, the same participation, no "
                   "amplification; docs/PRIVACY.md){}",
    "--bands": "--mechanism bandmf or blt: b, the groups of cyclic Poisson participation (bandmf: "
               "also the bands of its strategy; default 1: DP-FedEmb's noise and epsilon); each user takes part at "
               "rate b*M*K/N, at most once in any b consecutive rounds (in at most ceil(T / b) "
               "rounds)",
    "--tree-restarts": "tree noise (dp-ftrl-fedemb): restart the tree every epoch (one tree per "
                       "epoch)",
    "--allow-nonprivate-init": "accept {} trained WITHOUT DP on {} (refused otherwise); every "
                               "epsilon then says it does not cover {}",
    "--audit-canaries": "{} N canary {} (>= 20; about 1000 for a useful bound), each {}inserted "
                        "with probability 1/2{}, and print the empirical epsilon and 95%% lower "
                        "bounds beside the reported one (docs/AUDIT.md). {}",
}


def add_shared(group: Any, flag: str, *notes: str, **kwargs: Any) -> None:
    """``flag`` with its help of ``SHARED_HELP``, ``notes`` in its "{}"s; ``kwargs`` (type,
    default, choices, metavar) as ``add_argument`` takes them."""
    group.add_argument(flag, help=SHARED_HELP[flag].format(*notes), **kwargs)


def add_noise_seed_flags(group: Any, seed_flag: str, seeded: str) -> None:
    """``seed_flag`` (seeds the noise; ``seeded``: what else it seeds) and
    ``--secure-noise/--no-secure-noise`` (default: on unless ``seed_flag`` is given)."""
    group.add_argument(seed_flag, type=int, default=None,
                       help=f"seed the noise{seeded} for a reproducible experiment (default: the "
                            "OS's secure source); a seeded run uses the plain noise sampler and "
                            "says it is seeded")
    group.add_argument(
        "--secure-noise", action=argparse.BooleanOptionalAction, default=None,
        help="floating-point-hardened noise sampler (a fresh OS-keyed generator for every draw, each entry "
             "the normalised sum of two Gaussian draws; docs/PRIVACY.md). Default: on, except with "
             f"{seed_flag} (cannot be combined); --no-secure-noise: the plain sampler")


def check_config_dataset(config: Any, file: str, fix: str) -> None:
    """A ``UsageError`` when ``--config file``'s dataset directory (``config.data.path``) is
    not here, e.g. a run's released config.json, which names it by its directory's name."""
    path = config.data.path
    if path and not os.path.exists(path):
        raise UsageError(f"--config {file}: its dataset {path!r} is not here (a run's released config.json names "
                         f"the dataset by its directory's name only): {fix}, or use the run's private/config.json")


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


# ----------------------------------------- the model's input geometry (`dpemb eval`, `embed`)
def add_resize_flag(parser: argparse.ArgumentParser | Any) -> None:
    """``--resize`` of `dpemb eval` and `dpemb embed`: a dataset's images of another size
    than the model's input are resized on the fly (``check_input``), else refused."""
    parser.add_argument("--resize", action="store_true",
                        help="resize the dataset's images to the model's input size on the fly "
                             "(bilinear, antialiased) when they differ; without it a size mismatch "
                             "is an error")


def check_input(
    model: Any, card: dict[str, Any] | None, ds: Any, data_name: str, *, resize: bool
) -> tuple[int, str] | None:
    """None when ``ds``'s images fit the model (its input size and channels: from the card's
    backbone kwargs, else from the model); when they differ in size only and ``resize``, the
    side to resize them to and the line a command prints about it; otherwise a one-line
    DataError naming both geometries and the fix."""
    kw = ((card or {}).get("backbone") or {}).get("kwargs") or {}
    size = kw.get("image_size", getattr(model, "image_size", None))
    channels = kw.get("in_channels", getattr(model, "in_channels", None))
    if size is None or channels is None:
        raise DataError("the model card does not say the model's input size (backbone kwargs "
                        "image_size and in_channels)")
    size, channels = int(size), int(channels)
    h, w, c = ds.image_shape
    want, have = f"{size}x{size}x{channels}", f"{h}x{w}x{c}"
    if c != channels:
        raise DataError(f"the model takes {want} images, {data_name} holds {have}: re-make the data with "
                        f"--channels {channels} (--resize changes the size, not the channels)")
    if (h, w) == (size, size):
        return None
    if not resize:
        raise DataError(f"the model takes {want} images, {data_name} holds {have}: re-make the data with "
                        f"--image-size {size}, or pass --resize to resize on the fly")
    return size, (f"note: resizing {data_name}'s {have} images to the model's {want} "
                  "(bilinear, antialiased)")
