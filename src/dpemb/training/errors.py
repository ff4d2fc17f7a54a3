"""Errors a training run reports to the user as one clear line (no heavy imports)."""


class TrainingDiverged(RuntimeError):
    """The model became non-finite; the last checkpoint is left as it was."""


class PreReleaseError(ValueError):
    """A file written by a pre-release dpemb (before 0.1.0), in a layout or without
    records this dpemb requires: refused, never interpreted (see ``pre_release``)."""


def pre_release(path: object, remedy: str) -> PreReleaseError:
    """The one refusal of a file (checkpoint, run directory, feature file) written by a
    pre-release dpemb: it names the file and what to do (``remedy``: retrain, export or
    extract again with this dpemb)."""
    return PreReleaseError(f"{path} was written by a pre-release dpemb, whose files this dpemb does not read "
                           f"(no provenance or data records, or the old layout); {remedy}")


#: the remedy for a run's checkpoint or run directory
RETRAIN = "train the model again with this dpemb (the run cannot be resumed, exported or used as an --init)"
