"""Errors a training run reports to the user as one clear line (no heavy imports)."""


class TrainingDiverged(RuntimeError):
    """The model became non-finite; the last checkpoint is left as it was."""
