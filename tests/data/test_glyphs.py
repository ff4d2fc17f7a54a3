"""The built-in glyph benchmark: fonts, identity pool, regimes, rendering, determinism."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from dpemb.data.dataset import DataError, UserDataset
from dpemb.data.glyphs import GlyphConfig, GlyphConfigError, available_fonts, make_glyphs
from dpemb.data.glyphs.fonts import (
    FontInfo,
    Rejected,
    analyze_face,
    package_font_dirs,
    scan_fonts,
)
from dpemb.data.glyphs.identities import (
    LOOKALIKE_GROUPS,
    build_pool,
    candidate_code_points,
    label_name,
)
from dpemb.data.glyphs.render import Geometry, StrokeCache

SHARED = GlyphConfig(
    num_users=60, identities_per_user=10, images_per_identity=2, max_identities=30, seed=1
)
OWNED = GlyphConfig(
    regime="owned",
    num_users=40,
    identities_per_user=2,
    users_per_identity=2,
    images_per_identity=3,
    seed=2,
)
FACES = GlyphConfig(
    regime="owned", num_users=30, identities_per_user=1, images_per_identity=4, seed=3
)


@pytest.fixture(scope="module")
def shared() -> UserDataset:
    return make_glyphs(SHARED, progress=False)


@pytest.fixture(scope="module")
def owned() -> UserDataset:
    return make_glyphs(OWNED, progress=False)


@pytest.fixture(scope="module")
def fonts() -> list[FontInfo]:
    return available_fonts()


def holders(ds: UserDataset) -> dict[int, set[int]]:
    """identity label -> users holding it"""
    out: dict[int, set[int]] = {}
    for u, lab in zip(ds.user_of_example(), ds.labels):
        out.setdefault(int(lab), set()).add(int(u))
    return out


# ---------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"regime": "faces"}, "regime"),
        ({"num_users": 1}, "num_users"),
        ({"num_users": 10.0}, "num_users"),
        ({"identities_per_user": 0}, "identities_per_user"),
        ({"images_per_identity": 0}, "images_per_identity"),
        ({"image_size": 4}, "image_size"),
        ({"eval_identity_fraction": 1.0}, "eval_identity_fraction"),
        ({"public_user_fraction": -0.1}, "public_user_fraction"),
        ({"seed": -1}, "seed"),
        ({"max_identities": 1}, "max_identities"),
        ({"extra_font_paths": "fonts/x.ttf"}, "extra_font_paths"),
        ({"jitter": 5.0}, "jitter"),
        ({"occlusion": 1.5}, "occlusion"),
        ({"users_per_identity": 3}, "users_per_identity"),  # shared regime
        ({"identities_per_user": 50, "max_identities": 20}, "identities_per_user"),
        ({"regime": "owned", "num_users": 10, "users_per_identity": 3}, "num_users"),
        ({"regime": "owned", "num_users": 4, "users_per_identity": 2,
          "eval_identity_fraction": 0.9}, "eval_identity_fraction"),
        ({"regime": "owned", "num_users": 100, "max_identities": 50}, "max_identities"),
        ({"validation_identity_fraction": 1.0}, "validation_identity_fraction"),
        ({"eval_identity_fraction": 0.6, "validation_identity_fraction": 0.4},
         "validation_identity_fraction"),
        ({"eval_user_fraction": 1.5}, "eval_user_fraction"),
        ({"validation_user_fraction": 0.0}, "validation_user_fraction"),
        ({"num_users": 2}, "num_users"),  # 1 test and 1 validation writer: no training user
        ({"regime": "owned", "eval_user_fraction": 0.1}, "eval_user_fraction"),
        ({"regime": "owned", "num_users": 4, "eval_identity_fraction": 0.5,
          "validation_identity_fraction": 0.4}, "eval_identity_fraction"),  # 2 + 2 of 4 groups
    ],
)
def test_config_rejects_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(GlyphConfigError, match=field) as e:
        GlyphConfig(**kwargs)
    assert isinstance(e.value, ValueError)
    assert str(e.value).startswith("--")  # the flag first: what a CLI user types; the Python name after


def test_config_accepts_lists_of_font_paths_as_tuples():
    cfg = GlyphConfig(extra_font_paths=["a.ttf"])  # type: ignore[arg-type]
    assert cfg.extra_font_paths == ("a.ttf",) and hash(cfg)
    assert GlyphConfig().to_dict()["extra_font_paths"] == []


# ---------------------------------------------------------------------- fonts
def _tiny_font(path: Path, cmap: dict[int, str], names: list[str]) -> Path:
    """A TrueType font whose glyphs are boxes, with the given glyph names and cmap."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    order = [".notdef"] + names
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder(order)
    fb.setupCharacterMap(cmap)
    glyphs = {}
    for i, g in enumerate(order):
        pen = TTGlyphPen(None)
        w = 100 + (i * 37) % 500  # distinct boxes
        pen.moveTo((50, 0))
        pen.lineTo((50, 700))
        pen.lineTo((50 + w, 700))
        pen.lineTo((50 + w, 0))
        pen.closePath()
        glyphs[g] = pen.glyph()
    fb.setupGlyf(glyphs)
    fb.setupHorizontalMetrics({g: (700, 50) for g in order})
    fb.setupHorizontalHeader(ascent=800, descent=-200)
    fb.setupNameTable({"familyName": path.stem, "styleName": "Regular"})
    fb.setupOS2()
    fb.setupPost()
    fb.save(str(path))
    return path


def _letters() -> list[int]:
    return [cp for cp in range(0x21, 0x7F)]


def test_font_filter_accepts_a_font_whose_glyph_names_match(tmp_path, monkeypatch, fonts):
    monkeypatch.setenv("DPEMB_CACHE_DIR", str(tmp_path / "cache"))
    from fontTools import agl

    cps = _letters()
    names = [agl.UV2AGL.get(cp, f"uni{cp:04X}") for cp in cps]
    good = _tiny_font(tmp_path / "GoodBoxes.ttf", dict(zip(cps, names)), names)
    res = analyze_face(good, 0, candidate_code_points())
    assert isinstance(res, FontInfo), res
    assert res.chars == frozenset(cps)
    # extra paths reach the benchmark's font list
    assert any(f.path == str(good) for f in available_fonts([str(good)]))
    only = scan_fonts(candidate_code_points(), [str(tmp_path)], system=False, packages=False)
    assert [f.path for f in only.usable] == [str(good)]


def test_font_filter_rejects_a_font_mapping_letters_to_other_glyphs(tmp_path, monkeypatch, fonts):
    monkeypatch.setenv("DPEMB_CACHE_DIR", str(tmp_path / "cache"))
    from fontTools import agl

    cps = _letters()
    # like TeX's cm fonts: every code point drawn by the glyph of another character
    shifted = [agl.UV2AGL.get(cp + 1, f"uni{cp + 1:04X}") for cp in cps]
    bad = _tiny_font(tmp_path / "ShiftedBoxes.ttf", dict(zip(cps, shifted)), shifted)
    res = analyze_face(bad, 0, candidate_code_points())
    assert isinstance(res, Rejected) and "other glyphs" in res.reason
    assert not any(f.path == str(bad) for f in available_fonts([str(bad)]))


def test_font_filter_rejects_placeholder_fonts(tmp_path, monkeypatch):
    monkeypatch.setenv("DPEMB_CACHE_DIR", str(tmp_path / "cache"))
    cps = list(range(0x100, 0x180)) + list(range(0x400, 0x460))
    box = _tiny_font(tmp_path / "Boxes.ttf", {cp: "box" for cp in cps}, ["box"])
    res = analyze_face(box, 0, candidate_code_points())
    assert isinstance(res, Rejected) and "placeholder" in res.reason


def test_matplotlib_placeholder_and_cm_fonts_are_rejected(fonts):
    dirs = package_font_dirs()
    if not dirs:
        pytest.skip("matplotlib's fonts are not installed")
    cands = candidate_code_points()
    checked = 0
    for name, why in [
        ("LastResortHE-Regular.ttf", "placeholder"),
        ("cmr10.ttf", "other glyphs"),
        ("cmsy10.ttf", "other glyphs"),
        ("STIXNonUni.ttf", "covers only"),
        ("STIXSizOneSymReg.ttf", "covers only"),
    ]:
        path = dirs[0] / name
        if path.is_file():
            res = analyze_face(path, 0, cands)
            assert isinstance(res, Rejected) and why in res.reason, (name, res)
            checked += 1
    assert checked, "none of matplotlib's known bad fonts found"
    used = {Path(f.path).name for f in fonts}
    assert not any(n.startswith(("cm", "LastResort", "STIXNonUni", "STIXSiz")) for n in used)


def test_available_fonts_are_deduplicated_and_draw_the_basic_alphabet(fonts):
    assert len(fonts) >= 4, "a fresh machine has DejaVu (22 files) and matplotlib's fonts"
    keys = [(f.family.lower(), f.style.lower()) for f in fonts]
    assert len(keys) == len(set(keys)), "duplicate face copies were not removed"
    assert all(f.chars for f in fonts)
    drawn_by_all = frozenset.intersection(*(f.chars for f in fonts))
    assert set(map(ord, "0123456789ABCDEFGHJKMNPQRSTUVWXYZabdefghqrt")) <= drawn_by_all


def test_missing_extra_font_path_is_an_error(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        available_fonts([str(tmp_path / "nope.ttf")])


# ---------------------------------------------------------------------- pool
def test_lookalikes_are_never_both_in_the_pool(fonts):
    pool = build_pool(fonts)
    cps = {i.cp for i in pool}
    for group in LOOKALIKE_GROUPS:
        present = [c for c in group if ord(c) in cps]
        assert len(present) <= 1, f"look-alikes {present} both present"
    # Latin A is kept (drawn by the most fonts), its Greek and Cyrillic twins merged in
    a = next(i for i in pool if i.cp == ord("A"))
    assert set(a.merged) == {0x391, 0x410}


def test_no_two_pool_identities_render_identically_in_dejavu(fonts):
    """An independent check of the merge table: rasterise every basic identity in
    two common faces and compare the images pairwise."""
    pool = [i for i in build_pool(fonts) if i.tier == "basic"]
    faces = [
        k for k, f in enumerate(fonts) if f.name in ("DejaVu Sans Book", "DejaVu Serif Book")
    ]
    if not faces:
        pytest.skip("DejaVu Sans/Serif not installed")
    cache = StrokeCache(fonts, Geometry(28))
    for k in faces:
        pairs = [(k, i.cp) for i in pool if i.cp in fonts[k].chars]
        cache.add(pairs)
        rasters, _ = cache.arrays()
        x = np.stack([rasters[cache.index[p]] for p in pairs]).reshape(len(pairs), -1)
        x = x.astype(np.float64) / 255
        sq = (x * x).sum(1)
        dist = sq[:, None] + sq[None, :] - 2 * x @ x.T  # squared distances
        rel = dist / np.maximum(sq[:, None], sq[None, :])
        np.fill_diagonal(rel, 1.0)
        a, b = np.nonzero(np.triu(rel < 1e-3))
        same = [(f"U+{pairs[i][1]:04X}", f"U+{pairs[j][1]:04X}") for i, j in zip(a, b)]
        assert not same, f"{fonts[k].name}: identical renders {same}"


def test_pool_labels_are_code_points(shared):
    for name in shared.label_names:
        assert name.startswith("U+") and int(name[2:], 16) in candidate_code_points()
    assert label_name(0x41) == "U+0041"


# ---------------------------------------------------------------------- regimes
def test_shared_regime_structure(shared):
    cfg = SHARED
    assert shared.num_users == cfg.num_users
    n_test, n_val = cfg.held_out_users()
    assert (len(shared.eval_users), len(shared.validation_users)) == (n_test, n_val) == (12, 6)
    ev, va = set(shared.eval_labels), set(shared.validation_labels)
    assert (len(ev), len(va)) == (round(0.2 * 30), round(0.1 * 30))
    for u in range(shared.num_users):  # each user writes distinct characters, twice each
        _, labs = shared.user_examples(u)
        chars, counts = np.unique(labs, return_counts=True)
        assert np.all(counts == cfg.images_per_identity)
        if u in shared.eval_users:  # dedicated test writers write only test characters
            assert set(chars.tolist()) <= ev and len(chars) == min(cfg.identities_per_user, len(ev))
        elif u in shared.validation_users:
            assert set(chars.tolist()) <= va and len(chars) == min(cfg.identities_per_user, len(va))
        else:  # training writers write only training characters
            assert not set(chars.tolist()) & (ev | va) and len(chars) == cfg.identities_per_user
    users_of = holders(shared)
    train = [lab for lab in users_of if lab not in ev | va]
    # 42 training users x 10 characters over 21 training characters: ~20 writers each
    assert min(len(users_of[lab]) for lab in train) >= 5
    assert shared.source["pool_size"] == 30
    # every user writes in one font
    assert len(shared.source["user_fonts"]) == cfg.num_users


def test_no_user_or_identity_in_two_splits_and_nothing_wasted(shared, owned):
    for ds in (shared, owned, make_glyphs(FACES, progress=False)):
        s = ds.split()
        parts = {"public": s.public, "train": s.train, "validation": s.validation, "test": s.test}
        for a, b in itertools.combinations(parts, 2):
            assert not set(parts[a].user_names) & set(parts[b].user_names), (a, b)
        ids = {"train": set(s.train.label_names) | set(s.public.label_names),
               "validation": set(s.validation.label_names), "test": set(s.test.label_names)}
        for a, b in itertools.combinations(ids, 2):
            assert not ids[a] & ids[b], (a, b)
        assert ids["test"] == {ds.label_names[i] for i in ds.eval_labels}
        assert ids["validation"] == {ds.label_names[i] for i in ds.validation_labels}
        assert set(s.test.user_names) == {ds.user_names[u] for u in ds.eval_users}
        assert set(s.validation.user_names) == {ds.user_names[u] for u in ds.validation_users}
        assert all(p.num_examples for p in parts.values())
        assert not s.unused.any()  # every example is in exactly one split
        assert sum(p.num_examples for p in parts.values()) == ds.num_examples


def test_owned_regime_structure(owned):
    cfg = OWNED
    users_of = holders(owned)
    assert owned.num_classes == cfg.identities_needed() == 40
    assert all(len(us) == cfg.users_per_identity for us in users_of.values())
    # the users sharing an identity are a group: they hold exactly the same identities
    for lab, us in users_of.items():
        held = [set(owned.user_examples(u)[1].tolist()) for u in us]
        assert all(h == held[0] for h in held) and len(held[0]) == cfg.identities_per_user
    # test and validation identities come with their own owners (new people)
    ev, va = set(owned.eval_labels), set(owned.validation_labels)
    assert len(ev) == cfg.eval_groups(20) * cfg.identities_per_user == 8
    assert len(va) == cfg.validation_groups(20) * cfg.identities_per_user == 4
    for u in range(owned.num_users):
        labs = set(owned.user_examples(u)[1].tolist())
        assert (labs <= ev) == (u in owned.eval_users)
        assert (labs <= va) == (u in owned.validation_users)
        assert labs <= ev or labs <= va or not labs & (ev | va)
    # public users hold training identities only
    assert owned.public_users
    for u in owned.public_users:
        assert not set(owned.user_examples(u)[1].tolist()) & (ev | va)


@pytest.mark.timeout(60)  # a tiny build takes about a second
def test_face_like_regime_one_owner_per_identity():
    ds = make_glyphs(FACES, progress=False)
    users_of = holders(ds)
    assert len(users_of) == FACES.num_users
    assert all(len(us) == 1 for us in users_of.values())
    assert np.all(ds.user_sizes() == FACES.images_per_identity)


def test_public_users_are_training_writers(shared):
    held = set(shared.eval_labels) | set(shared.validation_labels)
    assert len(shared.public_users) == round(0.1 * (60 - 12 - 6))
    for u in shared.public_users:
        assert not set(shared.user_examples(u)[1].tolist()) & held


def test_owned_regime_beyond_the_font_pool_says_how_to_widen_it():
    cfg = GlyphConfig(regime="owned", num_users=60000, identities_per_user=1)
    with pytest.raises(DataError) as e:
        make_glyphs(cfg, progress=False)
    msg = str(e.value)
    assert "needs 60000 identities" in msg and "only" in msg
    assert "fonts-wqy-zenhei" in msg and "fonts-noto-cjk" in msg


# ---------------------------------------------------------------------- images
def test_images_have_ink_and_are_not_clipped(shared, owned):
    for ds in (shared, owned):
        x = np.asarray(ds.images[..., 0])
        assert ds.images.dtype == np.uint8 and ds.images.shape[1:] == (28, 28, 1)
        assert x.reshape(len(x), -1).max(1).min() >= 64, "an image has no ink"
        border = np.concatenate([x[:, 0], x[:, -1], x[:, :, 0], x[:, :, -1]], 1)
        assert (border.max(1) >= 128).mean() <= 0.01, "ink touches the border"
        # images vary, even two of one (user, identity)
        assert len(np.unique(x.reshape(len(x), -1), axis=0)) == len(x)


@pytest.mark.timeout(60)
def test_heavy_jitter_and_occlusion_still_keep_glyphs_inside():
    cfg = GlyphConfig(
        num_users=12, identities_per_user=8, images_per_identity=3, max_identities=24,
        jitter=3.0, occlusion=1.0, image_size=20, seed=5,
    )
    ds = make_glyphs(cfg, progress=False)
    x = np.asarray(ds.images[..., 0])
    assert ds.images.shape[1:] == (20, 20, 1)
    assert x.reshape(len(x), -1).max(1).min() >= 48
    border = np.concatenate([x[:, 0], x[:, -1], x[:, :, 0], x[:, :, -1]], 1)
    assert (border.max(1) >= 128).mean() <= 0.02


def test_same_identity_same_writer_images_differ_but_correlate(shared):
    """Per-image jitter: two images of one (user, identity) differ, yet are far more
    alike than images of two different identities by the same user."""
    x = np.asarray(shared.images[..., 0], dtype=np.float32)
    same, diff = [], []
    for u in range(20):
        s = shared.user_slice(u)
        imgs, labs = x[s], shared.labels[s]
        for i in range(0, len(labs), 2):
            assert labs[i] == labs[i + 1]
            same.append(np.corrcoef(imgs[i].ravel(), imgs[i + 1].ravel())[0, 1])
            diff.append(np.corrcoef(imgs[i].ravel(), imgs[(i + 2) % len(labs)].ravel())[0, 1])
    assert max(same) < 0.999
    assert np.median(same) > np.median(diff) + 0.2


# ---------------------------------------------------------------------- determinism
@pytest.mark.timeout(60)
def test_same_config_gives_byte_identical_dataset(shared, tmp_path):
    again = make_glyphs(SHARED, progress=False)
    assert again.images.tobytes() == shared.images.tobytes()
    np.testing.assert_array_equal(again.labels, shared.labels)
    np.testing.assert_array_equal(again.offsets, shared.offsets)
    assert again.label_names == shared.label_names
    assert again.eval_labels == shared.eval_labels and again.public_users == shared.public_users
    assert again.eval_users == shared.eval_users
    assert again.validation_labels == shared.validation_labels
    assert again.validation_users == shared.validation_users
    a, b = shared.save(tmp_path / "a"), again.save(tmp_path / "b")
    for name in ("images.npy", "labels.npy", "offsets.npy", "meta.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name


def test_another_seed_gives_another_dataset(shared):
    other = make_glyphs(
        GlyphConfig(**{**SHARED.to_dict(), "seed": 7, "extra_font_paths": ()}), progress=False
    )
    assert other.images.tobytes() != shared.images.tobytes()
    assert other.label_names != shared.label_names or not np.array_equal(
        other.labels, shared.labels
    )


def test_source_metadata_and_round_trip(shared, tmp_path):
    src = shared.source
    assert src["kind"] == "glyphs"
    assert src["config"] == SHARED.to_dict()
    assert src["pool_size"] == 30 and src["fonts"]
    assert all(0 <= f < len(src["fonts"]) for f in src["user_fonts"])
    json.dumps(src)
    loaded = UserDataset.load(shared.save(tmp_path / "g"))
    assert loaded.source == src
    np.testing.assert_array_equal(loaded.images, shared.images)


def test_progress_off_prints_nothing(capsys):
    make_glyphs(
        GlyphConfig(num_users=6, identities_per_user=4, images_per_identity=1, max_identities=8),
        progress=False,
    )
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


# ---------------------------------------------------------------------- CJK fonts
def _cjk_fonts(fonts: list[FontInfo]) -> list[FontInfo]:
    return [f for f in fonts if any(0xAC00 <= c <= 0xD7A3 or 0x4E00 <= c <= 0x9FFF for c in f.chars)]


def test_cjk_fonts_widen_the_pool(fonts):
    if not _cjk_fonts(fonts):
        pytest.skip("no CJK font installed (e.g. apt-get install fonts-wqy-zenhei)")
    pool = build_pool(fonts)
    cjk = [i for i in pool if i.tier == "cjk"]
    assert len(cjk) > 1000
    ds = make_glyphs(
        GlyphConfig(regime="owned", num_users=24, identities_per_user=1, images_per_identity=2,
                    max_identities=2000, seed=4),
        progress=False,
    )
    assert any(int(n[2:], 16) >= 0x4E00 for n in ds.label_names)
    # the shared regime stays on the basic alphabet unless asked for more
    small = make_glyphs(
        GlyphConfig(num_users=6, identities_per_user=4, images_per_identity=1, max_identities=12),
        progress=False,
    )
    assert all(int(n[2:], 16) < 0x3000 for n in small.label_names)


# ---------------------------------------------------------------------- empty glyphs
def _font_with_an_invisible_glyph(tmp_path: Path, invisible: int) -> Path:
    """Boxes for ASCII, except ``invisible``: a zero-area outline (passes the cmap and
    ``loca`` checks, rasterises to nothing)."""
    from fontTools import agl
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen

    cps = _letters()
    names = [agl.UV2AGL.get(cp, f"uni{cp:04X}") for cp in cps]
    order = [".notdef"] + names
    fb = FontBuilder(1000, isTTF=True)
    fb.setupGlyphOrder(order)
    fb.setupCharacterMap(dict(zip(cps, names)))
    glyphs = {}
    for i, g in enumerate(order):
        pen = TTGlyphPen(None)
        if i and cps[i - 1] == invisible:
            pen.moveTo((100, 0))
            pen.lineTo((100, 700))
            pen.lineTo((100, 350))
        else:
            w = 60 + (i * 37) % 400
            pen.moveTo((50, 0))
            pen.lineTo((50, 100 + (i * 53) % 600))
            pen.lineTo((50 + w, 700))
            pen.lineTo((50 + w, 0))
        pen.closePath()
        glyphs[g] = pen.glyph()
    fb.setupGlyf(glyphs)
    fb.setupHorizontalMetrics({g: (600, 50) for g in order})
    fb.setupHorizontalHeader(ascent=800, descent=-200)
    fb.setupNameTable({"familyName": "Invisible Q", "styleName": "Regular"})
    fb.setupOS2()
    fb.setupPost()
    path = tmp_path / "InvisibleQ.ttf"
    fb.save(str(path))
    return path


def test_glyphs_that_render_empty_are_dropped_and_the_build_retried(tmp_path, monkeypatch):
    import dpemb.data.glyphs.make as make_mod

    path = _font_with_an_invisible_glyph(tmp_path, ord("Q"))
    info = analyze_face(path, 0, candidate_code_points(), disk_cache=False)
    assert isinstance(info, FontInfo) and ord("Q") in info.chars  # passes the static checks
    cache = StrokeCache([info], Geometry(28))
    assert cache.add([(0, ord("Q")), (0, ord("R"))]) == [(0, ord("Q"))]
    assert (0, ord("R")) in cache.index and (0, ord("Q")) not in cache.index

    monkeypatch.setattr(make_mod, "available_fonts", lambda extra, progress: [info])
    found: list = []
    original_add = StrokeCache.add

    def recording_add(self, pairs, **kw):
        empty = original_add(self, pairs, **kw)
        found.extend(empty)
        return empty

    monkeypatch.setattr(make_mod.StrokeCache, "add", recording_add)
    cfg = GlyphConfig(num_users=8, identities_per_user=80, images_per_identity=1,
                      eval_identity_fraction=0.1, validation_identity_fraction=0.0, seed=3)
    ds = make_glyphs(cfg, progress=False)
    assert found == [(0, ord("Q"))]  # the first assignment used Q: the retry ran
    assert "U+0051" not in ds.label_names  # Q was dropped from the font, not drawn blank
    assert ds.num_classes >= 80
    x = np.asarray(ds.images[..., 0])
    assert x.reshape(len(x), -1).max(1).min() >= 64
