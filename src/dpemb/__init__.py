"""dpemb: image embedding models with user-level differential privacy."""

from dpemb.lazy import lazy_exports
from dpemb.openmp import prefer_passive_wait

prefer_passive_wait()  # before torch loads libgomp: see dpemb.openmp

__version__ = "0.1.0"

#: the Python API (docs/API.md), imported on first use so that `import dpemb` stays light
_API = {
    "train": "api", "load_model": "api", "embed": "api", "evaluate": "api", "export": "api",
    "TrainConfig": "training.run_config", "DataConfig": "training.run_config",
    "PrivacyRequest": "training.run_config", "PerformanceFlags": "training.run_config",
    "load_config": "training.run_config",
    "ModelConfig": "training.config", "OptimConfig": "training.config",
    "FederatedConfig": "algorithms.config", "LossConfig": "models.margin",
    "UserDataset": "data.dataset",
}
_names, __getattr__, __dir__ = lazy_exports(__name__, _API)
__all__ = ["__version__", *_names]
