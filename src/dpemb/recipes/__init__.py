"""The recipes shipped with dpemb: one TOML file each (``dpemb.training.recipes``)."""
