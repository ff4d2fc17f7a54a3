"""Configuration of the built-in glyph benchmark."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

REGIMES = ("shared", "owned")
SCRIPTS = ("unicode", "invented")
INVENTED_ALPHABET = 764  # the invented script's alphabet in the shared regime (as many as the basic tier)
CJK_FONT_PACKAGES = ("fonts-wqy-zenhei", "fonts-wqy-microhei", "fonts-arphic-uming",
                     "fonts-arphic-ukai", "fonts-ipafont-gothic", "fonts-unfonts-core",
                     "fonts-noto-cjk")


class GlyphConfigError(ValueError):
    """An invalid glyph benchmark configuration: a bad parameter value, not bad data
    (so a CLI reports it as a usage error)."""


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _held(fraction: float, n: int) -> int:
    """round(fraction * n), at least 1 when fraction > 0 and n >= 2."""
    k = int(round(fraction * n))
    return max(k, 1) if fraction > 0 and n >= 2 else k


@dataclass(frozen=True)
class GlyphConfig:
    """The glyph benchmark: identities are characters, users are writers.

    ``script``: ``"unicode"`` (characters the installed fonts draw) or ``"invented"``
    (made-up characters drawn with one pen, as many as needed; no font is used, see
    docs/GLYPHS.md, "Invented script"). The two regimes (``shared``: many writers per character; ``owned``: groups of
    ``users_per_identity`` own their identities), what is held out and every field's
    meaning and range: docs/GLYPHS.md, "Two regimes" and "Config". Test and validation
    identities come with their own users, who are never trained on.
    """

    regime: str = "shared"
    script: str = "unicode"
    num_users: int = 300
    identities_per_user: int = 40
    users_per_identity: int = 1
    images_per_identity: int = 2
    image_size: int = 28
    eval_identity_fraction: float = 0.2
    validation_identity_fraction: float = 0.1
    eval_user_fraction: float | None = None
    validation_user_fraction: float | None = None
    public_user_fraction: float = 0.1
    seed: int = 0
    max_identities: int | None = None
    extra_font_paths: tuple[str, ...] = ()
    jitter: float = 1.0
    occlusion: float = 0.0

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> GlyphConfigError:
            flag = "--" + {"extra_font_paths": "font", "num_users": "users"}.get(field, field).replace("_", "-")
            return GlyphConfigError(f"{flag} {getattr(self, field)!r} {why} (Python: GlyphConfig.{field})")

        if self.regime not in REGIMES:
            raise bad("regime", f"is not one of {REGIMES}")
        if self.script not in SCRIPTS:
            raise bad("script", f"is not one of {SCRIPTS}")
        for name, low in (
            ("num_users", 2),
            ("identities_per_user", 1),
            ("users_per_identity", 1),
            ("images_per_identity", 1),
        ):
            v = getattr(self, name)
            if not _is_int(v) or v < low:
                raise bad(name, f"must be an integer >= {low}")
        if not _is_int(self.image_size) or not 8 <= self.image_size <= 256:
            raise bad("image_size", "must be an integer in [8, 256]")
        optional = ("eval_user_fraction", "validation_user_fraction")  # None: automatic
        for name in ("eval_identity_fraction", "validation_identity_fraction", *optional,
                     "public_user_fraction"):
            v = getattr(self, name)
            if v is None and name in optional:
                continue
            if not _is_num(v) or not 0.0 <= v < 1.0:
                raise bad(name, "must be a number in [0, 1)")
        if self.eval_identity_fraction + self.validation_identity_fraction >= 1.0:
            raise bad(
                "validation_identity_fraction",
                f"plus eval_identity_fraction={self.eval_identity_fraction} leaves no "
                "training identities",
            )
        if not _is_int(self.seed) or self.seed < 0:
            raise bad("seed", "must be a non-negative integer")
        if self.max_identities is not None and (
            not _is_int(self.max_identities) or self.max_identities < 2
        ):
            raise bad("max_identities", "must be None or an integer >= 2")
        if not _is_num(self.jitter) or not 0.0 <= self.jitter <= 3.0:
            raise bad("jitter", "must be a number in [0, 3]")
        if not _is_num(self.occlusion) or not 0.0 <= self.occlusion <= 1.0:
            raise bad("occlusion", "must be a probability in [0, 1]")
        paths = self.extra_font_paths
        if isinstance(paths, (str, bytes)) or not all(isinstance(p, str) for p in paths):
            raise bad("extra_font_paths", "must be a tuple of path strings")
        object.__setattr__(self, "extra_font_paths", tuple(paths))
        if self.script == "invented":
            if self.extra_font_paths:
                raise bad("extra_font_paths", "applies to the unicode script only (the invented "
                          "script draws with a pen, not with fonts); leave it empty")
            if self.regime == "owned" and self.max_identities is not None:
                raise bad("max_identities", "does not apply to the invented script in the owned "
                          "regime (it invents as many identities as the owner groups need); "
                          "leave it None")

        if self.regime == "shared":
            if self.users_per_identity != 1:
                raise bad(
                    "users_per_identity",
                    "applies to the owned regime only (in the shared regime every "
                    "identity is written by many users); leave it at 1",
                )
            if self.max_identities is not None and self.identities_per_user > self.max_identities:
                raise bad(
                    "identities_per_user",
                    f"exceeds max_identities={self.max_identities}: a user writes "
                    "distinct characters",
                )
            if self.script == "invented" and self.identities_per_user > self.invented_identities():
                raise bad(
                    "identities_per_user",
                    f"exceeds the invented alphabet of {self.invented_identities()} characters "
                    "(a user writes distinct characters); raise max_identities",
                )
            for name, frac in (
                ("eval_user_fraction", self.eval_identity_fraction),
                ("validation_user_fraction", self.validation_identity_fraction),
            ):
                if frac > 0 and getattr(self, name) == 0:
                    raise bad(name, "must be > 0 when identities are held out for that split")
            n_test, n_val = self.held_out_users()
            if self.num_users - n_test - n_val < 1:
                raise bad(
                    "num_users",
                    f"leaves no training user after {n_test} test and {n_val} validation "
                    "users; raise it or lower the held-out fractions",
                )
        else:
            upi = self.users_per_identity
            if upi > self.num_users or self.num_users % upi:
                raise bad(
                    "num_users",
                    f"must be a multiple of users_per_identity={upi} (users come in "
                    "groups that share their identities)",
                )
            for name in ("eval_user_fraction", "validation_user_fraction"):
                if getattr(self, name) is not None:
                    raise bad(
                        name,
                        "applies to the shared regime only (in the owned regime the held-out "
                        "identities come with their owners); leave it None",
                    )
            groups = self.num_users // upi
            n_val, n_eval = self.validation_groups(groups), self.eval_groups(groups)
            for name, held in (("validation_identity_fraction", n_val),
                               ("eval_identity_fraction", n_eval)):
                if getattr(self, name) > 0 and held == 0:
                    raise bad(name, f"holds out no identity group of {groups}; raise it or "
                              "num_users")
            if n_eval + n_val >= groups:
                raise bad(
                    "eval_identity_fraction",
                    f"leaves no training identities ({n_eval} test and {n_val} validation "
                    f"groups of {groups} held out)",
                )
            if self.max_identities is not None and self.identities_needed() > self.max_identities:
                raise bad(
                    "max_identities",
                    f"is below the {self.identities_needed()} identities this owned-regime "
                    "config needs (num_users * identities_per_user / users_per_identity)",
                )

    # -- derived quantities
    def eval_groups(self, groups: int) -> int:
        """Owned regime: how many of ``groups`` owner groups are held out for test."""
        return _held(self.eval_identity_fraction, groups)

    def validation_groups(self, groups: int) -> int:
        """Owned regime: how many of ``groups`` owner groups are held out for validation."""
        return _held(self.validation_identity_fraction, groups)

    def held_out_users(self) -> tuple[int, int]:
        """Shared regime: the numbers of dedicated (test, validation) writers."""
        def held(user_f: float | None, ident_f: float) -> int:
            if ident_f <= 0:
                return 0
            return _held(ident_f if user_f is None else user_f, self.num_users)

        return (held(self.eval_user_fraction, self.eval_identity_fraction),
                held(self.validation_user_fraction, self.validation_identity_fraction))

    def identities_needed(self) -> int:
        """Owned regime: identities the build assigns (each to one owner group)."""
        return (self.num_users // self.users_per_identity) * self.identities_per_user

    def invented_identities(self) -> int:
        """Invented script: how many characters are invented (owned: one per identity
        the owner groups hold; shared: the alphabet, ``max_identities`` or 764)."""
        if self.regime == "owned":
            return self.identities_needed()
        return INVENTED_ALPHABET if self.max_identities is None else self.max_identities

    def to_dict(self) -> dict[str, Any]:
        """The fields as JSON values; ``script`` only when it is not ``"unicode"`` (so the
        metadata of a unicode build is what it was before the field existed)."""
        d = asdict(self)
        d["extra_font_paths"] = list(self.extra_font_paths)
        if self.script == "unicode":
            del d["script"]
        return d
