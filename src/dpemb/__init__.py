"""dpemb: image embedding models with user-level differential privacy."""

from dpemb.openmp import prefer_passive_wait

prefer_passive_wait()  # before torch loads libgomp: see dpemb.openmp

__version__ = "0.1.0"
