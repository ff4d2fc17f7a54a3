"""Lazy package attributes (PEP 562): a public name is imported from its submodule on
first use, so that importing a package stays light (no torch until a name needs it)."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, where: dict[str, str]) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package``, whose public names are the keys
    of ``where`` (name -> submodule, relative to ``package``). A name is imported on first
    use and then kept in the package; any other name raises :class:`AttributeError`."""
    names = sorted(where)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(names))

    return names, __getattr__, __dir__
