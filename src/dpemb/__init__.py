"""dpemb: image embedding models with user-level differential privacy."""

__version__ = "0.1.0"
