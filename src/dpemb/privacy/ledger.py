"""``PrivacyLedger``: what has been composed so far, epsilon every round, checkpointable.

The ledger is bound to one ``PrivacySpec``. ``epsilon()`` is the guarantee for the rounds
recorded (for the released sequence of models): dp_accounting's epsilon of ``dp_event()``,
read off the spec's memoised curve (``events.EpsilonCurve``), so calling it every round is
cheap; the same epsilon as composing ``dp_event()`` afresh, to float rounding
(``tests/privacy/test_dp_event.py``). Loading a state refuses one recorded under another spec.
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING, Any

from dpemb.privacy.events import epsilon_curve, require_supported, training_event
from dpemb.privacy.spec import PrivacySpec
from dpemb.privacy.statements import describe_mechanism

if TYPE_CHECKING:
    import dp_accounting


class PrivacyStateError(ValueError):
    """A saved privacy state does not belong to this privacy spec."""


class PrivacyLedger:
    """Rounds composed under one spec, and their epsilon."""

    def __init__(self, spec: PrivacySpec) -> None:
        if not isinstance(spec, PrivacySpec):
            raise TypeError(f"PrivacyLedger needs a PrivacySpec, got {type(spec).__name__}")
        self.spec = spec
        self._rounds = 0
        self._entries: list[dict[str, Any]] = []

    @property
    def rounds(self) -> int:
        """Rounds composed so far."""
        return self._rounds

    def step(self, n: int = 1) -> None:
        """Compose ``n`` more rounds of the spec's mechanism."""
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
            raise ValueError(f"rounds to compose must be a non-negative integer, got {n!r}")
        if n == 0:
            return
        start = self._rounds
        self._rounds += int(n)
        if self._entries and self._entries[-1]["to_round"] == start:
            self._entries[-1]["to_round"] = self._rounds
        else:
            self._entries.append({
                "from_round": start + 1,
                "to_round": self._rounds,
                "mechanism": describe_mechanism(self.spec),
                "fingerprint": self.spec.fingerprint(),
            })

    def dp_event(self, accountant: str = "rdp") -> dp_accounting.DpEvent:
        """The dp_accounting event of the rounds composed so far (``events.training_event``):
        what ``epsilon(accountant)`` is the epsilon of. Tree aggregation has two equivalent
        forms: "rdp" the zCDP / single-epoch tree events, "pld" the Gaussian one."""
        return training_event(self.spec, self._rounds, accountant=accountant)

    def epsilon(self, accountant: str = "rdp") -> float:
        """Epsilon at ``spec.resolved_delta`` for the rounds composed so far (inf if non-private)."""
        return self.epsilon_after(self._rounds, accountant)

    def epsilon_after(self, rounds: int, accountant: str = "rdp") -> float:
        """Epsilon if ``rounds`` rounds in total had been composed (for a budget stop)."""
        require_supported(self.spec, accountant)
        return epsilon_curve(self.spec, accountant)(rounds)

    def entries(self) -> list[dict[str, Any]]:
        """What has been composed: runs of consecutive rounds under this spec."""
        return [dict(e) for e in self._entries]

    def state_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.spec.fingerprint(),
            "spec": self.spec.to_dict(),
            "rounds": self._rounds,
            "entries": self.entries(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore; refuses a state whose spec fingerprint differs from this ledger's spec."""
        if state.get("fingerprint") != self.spec.fingerprint():
            raise PrivacyStateError(
                "the saved privacy ledger was recorded under a different privacy spec "
                f"({state.get('spec')}); resuming under {self.spec.to_dict()} would misstate epsilon"
            )
        rounds = state.get("rounds")
        if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 0:
            raise PrivacyStateError(f"saved ledger has an invalid round count {rounds!r}")
        self._rounds = int(rounds)
        self._entries = [dict(e) for e in state.get("entries", [])]
