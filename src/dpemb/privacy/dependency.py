"""The one error for a missing privacy accountant (Google's dp_accounting).

Without it no epsilon can be stated, so its absence stops every command that computes one with
one line naming the fix, never a traceback (docs/PRIVACY.md, "The guarantee"). ``events``,
``relations.to_dp_accounting`` and ``audit`` raise ``AccountantMissingError`` from a
failed import; specs, clipping and noise import without it.
"""

from __future__ import annotations

INSTALL_HINT = ("pip install dp-accounting==0.6.0 (the version dpemb pins), or install dpemb with its "
                "dependencies: `pip install -e .` or `make` in a checkout")


class AccountantMissingError(ImportError):
    """dp_accounting (or a package it needs) cannot be imported."""


def accountant_missing(error: ImportError) -> AccountantMissingError:
    """The one-line error for ``error``, a failed import of dp_accounting or its dependencies."""
    missing = getattr(error, "name", None) or "dp_accounting"
    return AccountantMissingError(
        f"the privacy accountant dp_accounting cannot be imported (missing module {missing!r}), so no epsilon "
        f"can be computed; install it: {INSTALL_HINT}"
    )
