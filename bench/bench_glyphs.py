"""Glyph benchmark generation speed: images/s of ``make_glyphs`` against a naive renderer.

The naive baseline draws each image on its own, as a straightforward implementation
would: rasterise the glyph with FreeType for every image (no stroke cache), thicken it
with scipy's grey dilation, warp it with ``scipy.ndimage.map_coordinates`` (same
affine + elastic model, same parameters), average down and add noise. Both run in the
same process on the same examples; the ratio is images/s of make_glyphs over naive.

    python bench/bench_glyphs.py                 # the demo: 300 users x 40 x 2 at 28 px
    python bench/bench_glyphs.py --users 3000    # 240k images
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def naive_render(ds, cfg, count: int) -> tuple[float, int]:
    """Seconds to draw the first ``count`` examples of ``ds`` one by one."""
    from scipy import ndimage

    from dpemb.data.glyphs.make import assign, select_pool
    from dpemb.data.glyphs.identities import build_pool
    from dpemb.data.glyphs.make import _ASSIGN, _JITTER, _POOL, _STYLE, _examples, available_fonts
    from dpemb.data.glyphs.render import (
        SUPERSAMPLE,
        Geometry,
        StrokeCache,
        draw_image_params,
        draw_writer_styles,
        warp_bank,
    )

    fonts = available_fonts(cfg.extra_font_paths)
    geometry = Geometry(cfg.image_size)
    pool = select_pool(build_pool(fonts), cfg, np.random.default_rng([cfg.seed, _POOL]))
    asg = assign(pool, fonts, cfg, np.random.default_rng([cfg.seed, _ASSIGN]))
    users, idents, _ = _examples(asg, cfg)
    users, idents = users[:count], idents[:count]
    stroke_cache = StrokeCache(fonts, geometry)
    stroke = np.array([stroke_cache.stroke_width(int(f)) for f in asg.user_font])
    styles = draw_writer_styles(cfg.num_users, np.random.default_rng([cfg.seed, _STYLE]), stroke, geometry)
    params = draw_image_params(
        np.zeros(len(users), dtype=np.int64), users, styles,
        np.random.default_rng([cfg.seed, _JITTER]), jitter=cfg.jitter,
        occlusion=cfg.occlusion, max_thicken=geometry.max_thicken,
    )
    s = cfg.image_size
    n_out = s * SUPERSAMPLE
    bank = warp_bank(n_out, np.random.default_rng([cfg.seed, 6]))
    centers = (np.arange(n_out) * 2 + 1) / n_out - 1
    gy, gx = np.meshgrid(centers, centers, indexing="ij")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    for i in range(len(users)):
        fresh = StrokeCache(fonts, geometry)  # no cache: rasterise for every image
        key = (int(asg.user_font[users[i]]), pool[idents[i]].cp)
        fresh.add([key])
        rasters, meta = fresh.arrays()
        img = rasters[0].astype(np.float32) / 255
        r = int(params.weight[i])
        if r:
            yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
            img = ndimage.grey_dilation(img, footprint=(xx**2 + yy**2) <= r * r + r)
        m = meta[0]
        centre = m[0:2] + params.offset[i] * m[2]
        lo, hi = m[3:5] - r, m[5:7] + r
        corners = np.array([lo, [hi[0], lo[1]], [lo[0], hi[1]], hi]) - centre
        v = corners @ np.linalg.inv(params.linear[i]).T
        limit = 1.0 - 2 / s - params.warp_amp[i].sum()
        half = max(m[2], np.abs(v).max() / limit)
        mat = params.linear[i] * half
        wi, wa = params.warp_index[i], params.warp_amp[i]
        d = bank[wi[0]] * wa[0] + bank[wi[1]] * wa[1]
        vx, vy = gx + d[..., 0], gy + d[..., 1]
        px = mat[0, 0] * vx + mat[0, 1] * vy + centre[0] - 0.5
        py = mat[1, 0] * vx + mat[1, 1] * vy + centre[1] - 0.5
        big = ndimage.map_coordinates(img, [py, px], order=1, cval=0.0)
        small = big.reshape(s, 2, s, 2).mean((1, 3)) * params.ink[i]
        small += rng.standard_normal(small.shape) * params.noise[i]
        np.clip(small * 255, 0, 255).round().astype(np.uint8)
    return time.perf_counter() - t0, len(users)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--identities-per-user", type=int, default=40)
    ap.add_argument("--images-per-identity", type=int, default=2)
    ap.add_argument("--image-size", type=int, default=28)
    ap.add_argument("--regime", choices=["shared", "owned"], default="shared")
    ap.add_argument("--naive-images", type=int, default=1500,
                    help="examples drawn by the naive baseline (default 1500)")
    args = ap.parse_args()

    from dpemb.data.glyphs import GlyphConfig, available_fonts, make_glyphs

    cfg = GlyphConfig(
        regime=args.regime, num_users=args.users, identities_per_user=args.identities_per_user,
        images_per_identity=args.images_per_identity, image_size=args.image_size,
    )
    t0 = time.perf_counter()
    fonts = available_fonts()
    t_fonts = time.perf_counter() - t0
    t0 = time.perf_counter()
    ds = make_glyphs(cfg, progress=False)
    t_make = time.perf_counter() - t0
    t_naive, n_naive = naive_render(ds, cfg, args.naive_images)

    fast = ds.num_examples / t_make
    slow = n_naive / t_naive
    print(f"glyphs benchmark: regime {cfg.regime}, {cfg.num_users} users x "
          f"{cfg.identities_per_user} identities x {cfg.images_per_identity} images, "
          f"{cfg.image_size}px; {len(fonts)} usable fonts (scan {t_fonts:.2f} s, "
          f"disk-cached), pool {ds.source['pool_size']} identities")
    print(f"| {'method':46s} | {'images':>7s} | {'seconds':>8s} | {'images/s':>9s} | {'ratio':>6s} |")
    print(f"|{'-' * 48}|{'-' * 9}|{'-' * 10}|{'-' * 11}|{'-' * 8}|")
    print(f"| {'naive: rasterise + scipy warp per image':46s} | {n_naive:7d} | "
          f"{t_naive:8.2f} | {slow:9.0f} | {1.0:6.2f} |")
    print(f"| {'make_glyphs: cached strokes, batched torch':46s} | {ds.num_examples:7d} | "
          f"{t_make:8.2f} | {fast:9.0f} | {fast / slow:6.2f} |")


if __name__ == "__main__":
    main()
