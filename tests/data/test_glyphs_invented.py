"""The glyph benchmark's invented script: made-up characters, as many as needed, no font."""

from __future__ import annotations

import numpy as np
import pytest

from dpemb.data.dataset import UserDataset
from dpemb.data.glyphs import GlyphConfig, GlyphConfigError, make_glyphs
from dpemb.data.glyphs import invented
from dpemb.data.glyphs import make as glyph_make
from dpemb.data.glyphs.render import Geometry
from tests.cli.test_data_cli import run

FACES = dict(script="invented", regime="owned", identities_per_user=1, images_per_identity=4,
             eval_identity_fraction=0.1, validation_identity_fraction=0.1, public_user_fraction=0.15,
             occlusion=0.3, seed=3)
GEOMETRY = Geometry(28)


@pytest.fixture(scope="module")
def faces() -> UserDataset:
    return make_glyphs(GlyphConfig(num_users=40, **FACES), progress=False)


# ---------------------------------------------------------------------- identities
def test_identity_j_does_not_depend_on_how_many_are_invented():
    small, small_meta = invented.invent(40, 5, GEOMETRY)
    large, large_meta = invented.invent(120, 5, GEOMETRY)
    assert small.tobytes() == large[:40].tobytes()
    np.testing.assert_array_equal(small_meta, large_meta[:40])
    other, _ = invented.invent(40, 6, GEOMETRY)  # the seed picks the alphabet
    assert all(other[j].tobytes() != small[j].tobytes() for j in range(40))


def test_identities_are_distinct_even_at_low_resolution():
    rasters, _ = invented.invent(1500, 0, GEOMETRY)
    assert len({r.tobytes() for r in rasters}) == 1500
    assert len({invented.thumbnail(r, GEOMETRY) for r in rasters}) == 1500


@pytest.mark.parametrize("workers", [1, 3])
def test_a_character_like_an_earlier_one_is_drawn_again(monkeypatch, workers):
    """Every other candidate repeats identity 0's strokes: invent must redraw them (also
    when the first attempts are drawn in forked processes)."""
    first = invented.invent_strokes(np.random.default_rng([0, invented.STREAM, 0, 0]))
    real, calls = invented.invent_strokes, []

    def copycat(rng: np.random.Generator) -> list[np.ndarray]:
        calls.append(1)
        return first if len(calls) % 2 == 0 else real(rng)

    monkeypatch.setattr(invented, "invent_strokes", copycat)
    rasters, _ = invented.invent(30, 0, GEOMETRY, workers=workers)
    assert len({r.tobytes() for r in rasters}) == 30
    assert len(calls) > (30 if workers == 1 else 0)  # the copies were rejected and redrawn (here: the redraws)


@pytest.mark.parametrize("script", ["invented", "unicode"])
def test_workers_draw_byte_identical_data(script):
    """3 processes draw the images (several 512-image chunks each with its own noise) and
    invent the characters exactly as one process does."""
    cfg = GlyphConfig(num_users=150, **{**FACES, "images_per_identity": 8, "script": script})
    one, three = (make_glyphs(cfg, progress=False, workers=w) for w in (1, 3))
    assert len(one.images) == 1200 and one.images.tobytes() == three.images.tobytes()
    assert np.array_equal(one.labels, three.labels) and one.source == three.source


def test_rasters_follow_the_stroke_cache_format():
    rasters, meta = invented.invent(50, 0, GEOMETRY)
    c, half = GEOMETRY.canvas, 0.7 * GEOMETRY.font_px
    assert rasters.dtype == np.uint8 and rasters.shape == (50, c, c)
    assert meta.shape == (50, 7) and np.all(meta[:, :3] == [c / 2, c / 2, half])
    for r, m in zip(rasters, meta):
        ys, xs = np.nonzero(r)
        assert (m[3], m[4], m[5], m[6]) == (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        pad = GEOMETRY.pad  # room for the writers' thickening, as for font glyphs
        assert pad <= m[3] and pad <= m[4] and m[5] <= c - pad and m[6] <= c - pad
        assert r.max() == 255 and 0.01 < (r > 127).mean() < 0.25


# ---------------------------------------------------------------------- populations
def test_a_population_far_beyond_the_fonts_is_assigned_one_new_identity_per_user():
    cfg = GlyphConfig(script="invented", regime="owned", num_users=100_000, identities_per_user=1,
                      images_per_identity=8, eval_identity_fraction=0.05,
                      validation_identity_fraction=0.05, public_user_fraction=0.15)
    asg = glyph_make.assign_invented_owned(cfg, np.random.default_rng([0, 2]))
    held = np.concatenate(asg.user_identities)
    assert len(asg.pool) == 100_000 and np.array_equal(held, np.arange(100_000))  # user u holds u
    assert len(asg.test_users) == len(asg.validation_users) == 5000
    np.testing.assert_array_equal(asg.eval_identities, held[asg.test_users])
    np.testing.assert_array_equal(asg.validation_identities, held[asg.validation_users])
    assert not set(asg.test_users.tolist()) & set(asg.validation_users.tolist())
    assert len(asg.public_users) == round(0.15 * 90_000)
    assert not set(asg.public_users.tolist()) & set(asg.test_users.tolist())
    users, idents, counts = glyph_make._examples(asg, cfg)
    assert len(users) == 800_000 and np.all(counts == 8)


def test_owner_groups_share_their_invented_identities():
    cfg = GlyphConfig(script="invented", regime="owned", num_users=30, identities_per_user=2,
                      users_per_identity=3, eval_identity_fraction=0.2)
    asg = glyph_make.assign_invented_owned(cfg, np.random.default_rng(0))
    for u, ids in enumerate(asg.user_identities):
        assert ids.tolist() == [2 * (u // 3), 2 * (u // 3) + 1]
    assert len(asg.test_users) == 6 and len(asg.eval_identities) == 4


def test_face_like_build(faces):
    assert faces.num_users == 40 and faces.num_classes == 40
    assert faces.label_names == [f"inv{j:06d}" for j in range(40)]
    for u in range(40):  # user u is the one owner of invented identity u
        assert set(faces.user_examples(u)[1].tolist()) == {u}
    src = faces.source
    assert src["script"] == "invented" and src["fonts"] == [] and src["pool_size"] == 40
    assert src["config"]["script"] == "invented" and "user_fonts" not in src
    assert GlyphConfig(**src["config"]) == GlyphConfig(num_users=40, **FACES)
    x = np.asarray(faces.images[..., 0])
    assert x.reshape(len(x), -1).max(1).min() >= 64, "an image has no ink"
    border = np.concatenate([x[:, 0], x[:, -1], x[:, :, 0], x[:, :, -1]], 1)
    assert (border.max(1) >= 128).mean() <= 0.01, "ink touches the border"
    assert len(np.unique(x.reshape(len(x), -1), axis=0)) == len(x)


def test_same_config_gives_byte_identical_dataset(faces, tmp_path):
    again = make_glyphs(GlyphConfig(num_users=40, **FACES), progress=False)
    a, b = faces.save(tmp_path / "a"), again.save(tmp_path / "b")
    for name in ("images.npy", "labels.npy", "offsets.npy", "meta.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_a_larger_population_draws_the_same_characters():
    """Writers differ (their styles are drawn per population), the characters do not:
    user u's examples are drawn from the raster of invented character u in both."""
    drawn = [glyph_make._draw_invented(GlyphConfig(num_users=n, **FACES), GEOMETRY, False)
             for n in (40, 100)]
    for u in range(40):
        a, b = (d.rasters[d.source[d.users == u]] for d in drawn)
        assert len(a) == 4 and a.tobytes() == b.tobytes()
    assert drawn[0].rasters.tobytes() == drawn[1].rasters[:40].tobytes()


def test_invented_builds_need_no_font(monkeypatch):
    def no_fonts(*args, **kwargs):
        raise AssertionError("the invented script must not look for fonts")

    monkeypatch.setattr(glyph_make, "available_fonts", no_fonts)
    ds = make_glyphs(GlyphConfig(script="invented", num_users=20, identities_per_user=6), progress=False)
    assert ds.source["pool_size"] == 764 and ds.num_users == 20  # the shared alphabet


def test_shared_regime_many_writers_per_invented_character():
    cfg = GlyphConfig(script="invented", num_users=60, identities_per_user=10, max_identities=30,
                      seed=1)
    ds = make_glyphs(cfg, progress=False)
    writers: dict[int, set[int]] = {}
    for u, lab in zip(ds.user_of_example(), ds.labels):
        writers.setdefault(int(lab), set()).add(int(u))
    assert len(writers) == 30 and min(len(w) for w in writers.values()) >= 3
    held = set(ds.eval_labels) | set(ds.validation_labels)
    for u in set(range(60)) - set(ds.eval_users) - set(ds.validation_users):
        assert not set(ds.user_examples(u)[1].tolist()) & held


def test_unicode_metadata_has_no_script_field():
    """Unicode builds keep the metadata they had before the field existed."""
    assert "script" not in GlyphConfig().to_dict()
    assert GlyphConfig(script="invented").to_dict()["script"] == "invented"


# ---------------------------------------------------------------------- errors and CLI
@pytest.mark.parametrize("kwargs, flag, field", [
    ({"script": "klingon"}, "--script", "script"),
    ({"script": "invented", "extra_font_paths": ("a.ttf",)}, "--font", "extra_font_paths"),
    ({"script": "invented", "regime": "owned", "max_identities": 50}, "--max-identities",
     "max_identities"),
    ({"script": "invented", "identities_per_user": 800}, "--identities-per-user",
     "identities_per_user"),
])
def test_fields_that_do_not_apply_are_refused(kwargs, flag, field):
    with pytest.raises(GlyphConfigError) as e:
        GlyphConfig(**kwargs)
    assert str(e.value).startswith(flag) and f"GlyphConfig.{field}" in str(e.value)


def test_cli_script_flag_round_trip(tmp_path, capsys):
    out = tmp_path / "inv"
    assert run(["data", "make", "glyphs", "--script", "invented", "--regime", "owned", "--users", "24",
                "--identities-per-user", "1", "--images-per-identity", "2", "--eval-identity-fraction",
                "0.1", "--validation-identity-fraction", "0.1", "--workers", "2", "--out", str(out),
                "--no-progress"]) == 0
    ds = UserDataset.load(out)
    assert ds.source["config"]["script"] == "invented" and ds.label_names[0] == "inv000000"
    assert ds.num_users == ds.num_classes == 24
    with pytest.raises(SystemExit) as e:
        run(["data", "make", "glyphs", "--script", "invented", "--font", "x.ttf", "--out",
             str(tmp_path / "f")])
    assert e.value.code == 2 and "unicode script only" in capsys.readouterr().err
