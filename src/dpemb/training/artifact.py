"""The release artifact: what a training run publishes, apart from its private state.

An artifact is a directory (a run directory is one) holding ``model.safetensors`` (the
backbone's state dict, nothing else) and ``model_card.json`` (its fields: docs/PRIVACY.md,
"What is released, what is private", and docs/MODELS.md, "The model card"). It holds
nothing the guarantee does not cover: no optimizer, noise generator, sampler, tree or
ledger state, no seeds, no data fingerprints. ``dpemb embed``, ``eval``, ``features`` and
``--init`` read artifacts; the checkpoint (``private/checkpoint.pt``) is private training
state and is refused downstream (``dpemb export`` writes an artifact from it).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from dpemb.models import Backbone, build_backbone
from dpemb.atomic import atomic_write, atomic_write_json
from dpemb.privacy import PrivacySpec
from dpemb.privacy.events import event_from_dict
from dpemb.training.checkpoint import CheckpointError, backbone_from_checkpoint, load_checkpoint
from dpemb.training.composition import composed_total
from dpemb.training.errors import RETRAIN, pre_release
from dpemb.training.provenance import (
    Provenance,
    compact_privacy,
    dataset_name,
    included_ancestors,
    qualify_privacy,
    source_summary,
)
from dpemb.training.rundir import ARTIFACT_WEIGHTS, MODEL_CARD, checkpoint_in

CARD_FORMAT = "dpemb-model-card"
CARD_VERSION = 1
EXTRAPOLATED_LABEL = ("extrapolated: not the population trained on (the paper's convention: "
                      "k times more users, clients per round and noise)")
SEEDED_NOTE = "noise and sampling were seeded: a reproducible experiment, not a release"

# the privacy keys a card may hold (anything else a report adds stays out of the card)
_PRIVACY_KEYS = ("spec", "noise_seeded", "noise_sampler", "rounds_composed", "statement", "initialisation",
                 "total_with_init", "adaptive_clipping", "audit", "dp_event", "dp_event_pld")
_EXTRAPOLATION_KEYS = ("population", "factor", "noise_multiplier", "clients_per_round", "epsilon_rdp", "epsilon_pld",
                       "accountant", "delta_note", "delta", "statement")


class ArtifactError(CheckpointError):
    """No usable release artifact at a path (or a private checkpoint given instead)."""


def export_hint(run: str | os.PathLike) -> str:
    return (f"write the release artifact with `dpemb export {run} --out DIR` and give DIR (or the run "
            "directory, if DIR is the run directory)")


# ------------------------------------------------------------------------------ the card
def privacy_section(privacy: Any) -> dict[str, Any]:
    """A report's privacy entry, reduced to the statements a card releases."""
    if isinstance(privacy, str):
        return {"private": False, "statement": privacy}
    if not isinstance(privacy, dict):
        raise TypeError(f"a privacy section must be a string or a dict, got {type(privacy).__name__}")
    private = any(k.startswith("epsilon_") for k in privacy)
    out: dict[str, Any] = {"private": private}
    for k, v in privacy.items():
        if k in _PRIVACY_KEYS or k.startswith(("epsilon_", "statement_")):
            out[k] = v
    spec = privacy.get("spec")
    if private and isinstance(spec, dict):
        out["unit"] = spec["unit"]
        out["relation"] = spec["relation"]
        out["delta"] = PrivacySpec(**spec).resolved_delta
    if isinstance(privacy.get("extrapolated"), list):
        out["extrapolated"] = [
            {"label": EXTRAPOLATED_LABEL, **{k: ex[k] for k in _EXTRAPOLATION_KEYS if k in ex}}
            for ex in privacy["extrapolated"] if isinstance(ex, dict)
        ]
    if privacy.get("noise_seeded"):
        out["note"] = SEEDED_NOTE
    return out


INTENDED_USE = ("L2-normalised image embeddings for verification (cosine similarity of two images against "
                "a threshold) and retrieval of identities like the training data's (same kind of images, "
                "same preprocessing)")
LIMITATIONS = (
    "evaluated only on the held-out split named under evaluation, of the training data set; not evaluated "
    "on other domains, image sizes or preprocessing",
    "the privacy statements cover the training data set's users under the stated unit and neighbouring "
    "relation only: not the initialisation's data (see provenance.init), not hyperparameter tuning on the "
    "same data, not data used for evaluation",
    "embeddings are not calibrated probabilities: pick the verification threshold on data of the intended "
    "domain (the card's metrics are at fixed false-accept rates of its evaluation split)",
)


def input_section(backbone_name: str, backbone_kwargs: dict[str, Any]) -> dict[str, Any]:
    """How an image becomes the model's input, exactly as ``dpemb embed`` does it
    (``dpemb.data.images.decode_image``, ``dpemb.data.tensors.to_float_tensor``)."""
    from dpemb.models import input_normalisation

    size, channels = int(backbone_kwargs["image_size"]), int(backbone_kwargs["in_channels"])
    return {
        "image_size": size,
        "channels": channels,
        "tensor": f"float32 (N, {channels}, {size}, {size}), NCHW",
        "decode": (f"EXIF orientation applied; {'grey (ITU-R 601-2 luma)' if channels == 1 else 'RGB'}; "
                   f"16-bit grey scaled to 8 bits (value / 257); shorter side resized to {size} "
                   "(bilinear, antialiased) and the centre square kept"),
        "value_range": "[0, 1]: the 8-bit pixel value / 255",
        "normalisation": input_normalisation(backbone_name),
        "output": "the backbone's embedding; dpemb embed and the ONNX/TorchScript exports L2-normalise it",
    }


def held_out_evaluation(report: dict[str, Any]) -> dict[str, Any] | None:
    """The final evaluation a run's report.json releases (metrics on the held-out
    split it names), as the card states it; None when the report has none."""
    from dpemb.training.round_log import METRIC_PREFIXES

    final = report.get("final")
    if not isinstance(final, dict) or not final or not report.get("eval_split"):
        return None
    out: dict[str, Any] = {"split": report["eval_split"]}
    for k in ("eval_identities", "eval_examples", "rounds", "steps"):
        if isinstance(report.get(k), int):
            out[k.removeprefix("eval_")] = report[k]
    out["metrics"] = {k: v for k, v in sorted(final.items()) if k.startswith(METRIC_PREFIXES)}
    for k in ("eval_positive_pairs", "eval_negative_pairs", "unsupported_fars"):  # what the rates rest on
        if k in final:
            out[k.removeprefix("eval_")] = final[k]
    return out


def make_card(
    *,
    backbone_name: str,
    backbone_kwargs: dict[str, Any],
    embedding_dim: int,
    trainable: str,
    algorithm: str,
    progress: dict[str, int],
    provenance: dict[str, Any],
    privacy: Any,
    loss: dict[str, Any] | None = None,
    ema_decay: float = 0.0,
    evaluation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The model card (JSON-ready). ``privacy``: a report's privacy entry; ``progress``:
    ``{"rounds": n, "planned_rounds": T}`` or ``{"steps": n, "planned_steps": T}``;
    ``loss`` (``{"kind", "scale", "margin"}``) and ``evaluation`` are omitted when None;
    ``ema_decay`` > 0: the weights are an exponential moving average of the server
    models (recorded as ``weight_average``)."""
    section = privacy_section(privacy)
    return {
        "format": CARD_FORMAT,
        "format_version": CARD_VERSION,
        "weights": ARTIFACT_WEIGHTS,
        "backbone": {"name": backbone_name, "kwargs": dict(backbone_kwargs)},
        "embedding_dim": int(embedding_dim),
        "trainable": trainable,
        "algorithm": algorithm,
        **({"loss": dict(loss)} if loss is not None else {}),
        **({"weight_average": {"kind": "ema", "decay": float(ema_decay),
                               "of": "the server models (post-processing: the privacy is the same)"}}
           if ema_decay else {}),
        **{k: int(v) for k, v in progress.items()},
        **training_status(progress),
        "provenance": {**provenance, "privacy": compact_privacy(section)},
        "privacy": section,
        "input": input_section(backbone_name, backbone_kwargs),
        **({"evaluation": dict(evaluation)} if evaluation is not None else {}),
        "intended_use": INTENDED_USE,
        "limitations": list(LIMITATIONS),
    }


def training_status(progress: dict[str, int]) -> dict[str, str]:
    """``{"status": ...}``: "complete", or "incomplete: stopped at round 8 of 16" for the
    release a checkpoint wrote before the run's end (a signal, a crash, a divergence)."""
    for unit in ("rounds", "steps"):
        done, planned = progress.get(unit), progress.get(f"planned_{unit}")
        if done is not None and planned is not None:
            return {"status": "complete" if done >= planned else
                    f"incomplete: stopped at {unit[:-1]} {done} of {planned}"}
    return {}


# ------------------------------------------------------------------------------ writing
def write_artifact(directory: str | os.PathLike, backbone: torch.nn.Module, card: dict[str, Any]) -> Path:
    """Write ``model.safetensors`` (the backbone's state dict only) and ``model_card.json``
    into ``directory``, each atomically, with the umask's permissions."""
    from safetensors.torch import save_file

    directory = Path(directory)
    weights = {k: v.detach().cpu().contiguous().clone() for k, v in backbone.state_dict().items()}
    atomic_write(directory / ARTIFACT_WEIGHTS,
                 # ONE metadata key: safetensors serialises the metadata from a hash map, so
                 # with two keys their order (and the file's bytes) varied between runs
                 lambda p: save_file(weights, str(p), metadata={"dpemb": f"{CARD_FORMAT} in {MODEL_CARD}"}))
    atomic_write_json(directory / MODEL_CARD, card)
    return directory


class Release:
    """A training run's artifact writer: fixed facts (backbone, algorithm, provenance,
    init caveats) set once; ``write`` adds the weights and privacy of the moment."""

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        algorithm: str,
        trainable: str,
        meta: dict[str, Any],
        provenance: Provenance | None,
        source: dict[str, Any] | None,
        private_training: bool,
        loss: Any = None,
        ema_decay: float = 0.0,
    ):
        prov = provenance or Provenance()
        self.directory = Path(directory)
        loss = None if loss is None else dict(kind=loss.kind, scale=loss.scale, margin=loss.margin)
        self.card_facts = dict(  # make_card's arguments that stay the same for the whole run
            backbone_name=meta["backbone_name"], backbone_kwargs=dict(meta["backbone_kwargs"]),
            trainable=trainable, algorithm=algorithm, ema_decay=float(ema_decay), loss=loss)
        self.caveats = list(meta.get("init_caveats", []))
        self.init_privacy = meta.get("init_privacy")  # the init's card privacy section (public), when an artifact
        self.provenance = {
            "dataset": dataset_name(prov.dataset),
            "source": source_summary(source),
            "train_split": prov.train_split,
            "private_training": bool(private_training),
            "init": meta.get("init_provenance", "random"),
        }

    def privacy(self, privacy: Any) -> Any:
        """A report's privacy entry with the initialisation's caveats on every statement
        and, when the init (or an ancestor) was trained with DP on these users, the total
        epsilon of both trainings (``total_with_init``)."""
        out = qualify_privacy(privacy, self.caveats)
        total = init_total(privacy, self.provenance["init"], self.init_privacy)
        return {**out, "total_with_init": total} if total is not None else out

    def write(self, backbone: Backbone, privacy: Any, evaluation: dict[str, Any] | None = None,
              **progress: int) -> dict[str, Any]:
        """Write the artifact for the model as it is now; returns its card."""
        card = make_card(**self.card_facts, embedding_dim=int(backbone.embedding_dim),
                         progress=progress, provenance=self.provenance,
                         privacy=self.privacy(privacy), evaluation=evaluation)
        write_artifact(self.directory, backbone, card)
        return card


def init_total(privacy: Any, init: Any, init_privacy: dict[str, Any] | None) -> dict[str, Any] | None:
    """The total epsilon (RDP) of a DP run with privacy section ``privacy`` and the DP
    models of its init chain (``init``: its init's provenance; ``init_privacy``: the init
    card's privacy section) that may have trained on its users; None when there are
    none, or the run is not private. See ``dpemb.training.composition``."""
    if not isinstance(privacy, dict) or not isinstance(privacy.get("epsilon_rdp"), float) or \
            not {"spec", "dp_event"} <= privacy.keys():
        return None
    dp_models = tuple(p for _, p in included_ancestors(init) if p.get("private_training"))
    if not dp_models:
        return None
    spec = PrivacySpec(**privacy["spec"])
    event = event_from_dict(privacy["dp_event"])  # the run's mechanism, as its privacy section records it
    return composed_total(event, run_epsilon=privacy["epsilon_rdp"], delta=spec.resolved_delta, accountant="rdp",
                          unit=spec.unit, dp_models=dp_models, direct=init, direct_privacy=init_privacy,
                          label="total with the initialisation",
                          together=f"--init {init.get('model') or 'the init'}'s training and this run")


# ------------------------------------------------------------------------------ reading
def find_artifact(path: str | os.PathLike) -> Path | None:
    """The artifact directory ``path`` names (an artifact or run directory, or its
    model_card.json / model.safetensors), or None when there is none."""
    path = Path(path)
    d = path if path.is_dir() else path.parent
    if path.is_file() and path.name not in (ARTIFACT_WEIGHTS, MODEL_CARD):
        return None
    return d if (d / MODEL_CARD).is_file() and (d / ARTIFACT_WEIGHTS).is_file() else None


def resolve_model(path: str | os.PathLike) -> Path:
    """The artifact directory for a downstream command; ``ArtifactError`` saying what
    to do for a private checkpoint, a run without an artifact, or nothing at all."""
    p = Path(path)
    found = find_artifact(p)
    if found is not None:
        return found
    if not p.exists():
        raise ArtifactError(f"{p} does not exist: give a run directory or a release artifact "
                            f"({ARTIFACT_WEIGHTS} + {MODEL_CARD})")
    if p.is_file() and _is_torch_file(p):
        run = _run_of(p)
        fix = (f"give the run directory {run}, which holds its release artifact (or a copy written with "
               f"`dpemb export {run} --out DIR`)" if find_artifact(run) is not None else export_hint(run))
        raise ArtifactError(
            f"{p} is a training checkpoint: it holds private training state (noise generator, "
            f"sampler, optimizer) and is not for downstream use; {fix}"
        )
    if p.is_dir() and checkpoint_in(p) is not None:
        raise ArtifactError(
            f"{p} has no release artifact ({ARTIFACT_WEIGHTS} + {MODEL_CARD}), only private training "
            f"state; {export_hint(p)}"
        )
    raise ArtifactError(f"{p} is not a dpemb release artifact: expected a directory with "
                        f"{ARTIFACT_WEIGHTS} and {MODEL_CARD}")


def _is_torch_file(p: Path) -> bool:
    if p.suffix in (".pt", ".pth", ".ckpt"):
        return True
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head[:2] == b"PK" or head[:1] == b"\x80"  # torch zip archive or a raw pickle


def read_card(directory: str | os.PathLike) -> dict[str, Any]:
    path = Path(directory) / MODEL_CARD
    try:
        card = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ArtifactError(f"{path} is unreadable ({e})") from e
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT:
        raise ArtifactError(f"{path} is not a dpemb model card")
    if card.get("format_version") != CARD_VERSION:
        raise ArtifactError(f"{path}: unsupported model-card version {card.get('format_version')!r}")
    if not isinstance(card.get("provenance"), dict):
        raise pre_release(path, RETRAIN)
    return card


def load_artifact(path: str | os.PathLike, device: torch.device | str = "cpu") -> tuple[Backbone, dict[str, Any]]:
    """The backbone (weights loaded, on ``device``) and card of the artifact at ``path``
    (a run directory, an artifact directory, or its model_card.json / model.safetensors)."""
    from safetensors.torch import load_file

    d = resolve_model(path)
    card = read_card(d)
    try:
        model = build_backbone(card["backbone"]["name"], **card["backbone"]["kwargs"])
        weights = load_file(str(d / ARTIFACT_WEIGHTS), device="cpu")
        model.load_state_dict(weights)
    except (KeyError, TypeError, RuntimeError, OSError, ValueError) as e:
        raise ArtifactError(f"{d}: the weights do not match the card's backbone ({e})") from e
    return model.to(device), card


def init_provenance(card: dict[str, Any], where: str | os.PathLike) -> dict[str, Any]:
    """The provenance a run started from this card records under ``init``."""
    # a release names the init by its directory's name, never the path to it
    return {"model": dataset_name(where), "algorithm": card.get("algorithm"), **card["provenance"]}


# ------------------------------------------------------------------------------ export
def _run_of(path: str | os.PathLike) -> Path:
    p = Path(path)
    if p.is_dir():
        return p
    return p.parent.parent if p.parent.name == "private" else p.parent


def with_report_evaluation(card: dict[str, Any], run: Path) -> dict[str, Any]:
    """``card`` with the run's released final evaluation (its report.json) when the
    card has none and the report is of the same rounds or steps as the weights."""
    if "evaluation" in card:
        return card
    try:
        report = json.loads((run / "report.json").read_text())
    except (OSError, ValueError):
        return card
    evaluation = held_out_evaluation(report) if isinstance(report, dict) else None
    same = any(k in card and report.get(k) == card[k] for k in ("rounds", "steps"))
    if evaluation is None or not same:
        return card
    return {**card, "evaluation": evaluation}


@dataclass(frozen=True)
class Exported:
    """A model file ``dpemb export`` wrote, and its check against ``dpemb embed``
    (None for the safetensors artifact, which is what embed reads)."""

    path: Path
    runtime: str | None = None
    checked: int = 0
    max_difference: float | None = None


EXPORT_FILES = {"safetensors": ARTIFACT_WEIGHTS, "onnx": "model.onnx", "torchscript": "model.torchscript.pt"}


def write_export(directory: str | os.PathLike, backbone: Backbone, card: dict[str, Any], fmt: str) -> Exported:
    """Write ``backbone`` in format ``fmt`` (safetensors, onnx, torchscript) beside a copy of
    ``card`` into ``directory``; an ONNX or TorchScript file is run (onnxruntime,
    torch.jit.load) on a check batch and compared with ``dpemb.models.embed``: an
    ``ArtifactError`` (and no file left) when they differ by more than
    ``MAX_ABS_DIFFERENCE``."""
    from dpemb.models import export as ex

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if fmt == "safetensors":
        write_artifact(directory, backbone, card)
        return Exported(directory / ARTIFACT_WEIGHTS)
    if fmt not in EXPORT_FILES:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FILES)}")
    if fmt == "onnx":
        missing = [m for m in ("onnx", "onnxruntime") if importlib.util.find_spec(m) is None]
        if missing:
            raise ArtifactError(f"--format onnx needs the package(s) {', '.join(missing)}: "
                                f"pip install {' '.join(missing)} (or pip install -e '.[test]')")
    write, run, runtime = ((ex.export_onnx, ex.run_onnx, "onnxruntime") if fmt == "onnx"
                           else (ex.export_torchscript, ex.run_torchscript, "torch.jit.load"))
    backbone = copy.deepcopy(backbone).cpu().eval()  # the caller's model keeps its device and mode
    images = ex.example_images(backbone)
    checked: list[float] = []

    def write_checked(tmp: Path) -> None:
        write(backbone, tmp)
        diff = ex.max_difference(backbone, run, tmp, images)
        if not diff <= ex.MAX_ABS_DIFFERENCE:
            raise ArtifactError(f"the {fmt} export differs from dpemb embed by {diff:.2e} (more than "
                                f"{ex.MAX_ABS_DIFFERENCE:.0e}) on a check batch; not written")
        checked.append(diff)

    target = atomic_write(directory / EXPORT_FILES[fmt], write_checked)
    atomic_write_json(directory / MODEL_CARD, card)
    return Exported(target, runtime, len(images), checked[0])


def export_run(run: str | os.PathLike, out: str | os.PathLike,
               fmt: str = "safetensors") -> tuple[Path, dict[str, Any], Path, Exported]:
    """Write a run's checkpoint (a run directory or the checkpoint file) into ``out`` in
    format ``fmt`` (:func:`write_export`); returns (out, card, checkpoint, what was written)."""
    path = checkpoint_in(run) if Path(run).is_dir() else Path(run)
    if path is None:
        raise CheckpointError(f"{run} holds no checkpoint (looked for private/checkpoint.pt)")
    state = load_checkpoint(path)
    card = state["model_card"]  # the card of the artifact written with the checkpoint
    if not isinstance(card, dict) or card.get("format") != CARD_FORMAT or \
            card.get("format_version") != CARD_VERSION:
        raise pre_release(path, RETRAIN)  # a card of a pre-release dpemb
    card = with_report_evaluation(card, _run_of(path))
    model = backbone_from_checkpoint(state)
    written = write_export(out, model, card, fmt)
    return Path(out), card, path, written
