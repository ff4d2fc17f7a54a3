"""dpemb: image embedding models with user-level differential privacy."""

from dpemb.openmp import prefer_passive_wait

prefer_passive_wait()  # before torch loads libgomp: see dpemb.openmp

__version__ = "0.1.0"

#: the Python API (docs/API.md), imported on first use so that `import dpemb` stays light
_API = {
    "train": "dpemb.api", "load_model": "dpemb.api", "embed": "dpemb.api", "evaluate": "dpemb.api",
    "export": "dpemb.api",
    "TrainConfig": "dpemb.training.run_config", "DataConfig": "dpemb.training.run_config",
    "PrivacyRequest": "dpemb.training.run_config", "PerformanceFlags": "dpemb.training.run_config",
    "load_config": "dpemb.training.run_config",
    "ModelConfig": "dpemb.training.config", "OptimConfig": "dpemb.training.config",
    "FederatedConfig": "dpemb.algorithms.config", "LossConfig": "dpemb.models.margin",
    "UserDataset": "dpemb.data.dataset",
}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    raise AttributeError(f"module 'dpemb' has no attribute {name!r}")
