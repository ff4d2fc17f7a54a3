"""Logs a person can read: periodic progress off a terminal, quiet closed pipes, fast start."""

from __future__ import annotations

import io
import subprocess
import sys
import time

from dpemb.progress import progress


def test_progress_off_a_terminal_is_periodic_plain_lines():
    out = io.StringIO()  # not a TTY
    bar = progress(total=500, desc="train", unit="step", stream=out, interval=3600)
    for _ in range(500):
        bar.set_postfix(loss="1.0")
        bar.update(1)
    bar.close()
    text = out.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert 1 <= len(lines) <= 3, lines  # the first draw and the final line, not one per step
    assert "500/500" in lines[-1]


def test_disabled_progress_writes_nothing():
    out = io.StringIO()
    bar = progress(total=10, stream=out, enabled=False)
    bar.update(10)
    bar.close()
    assert out.getvalue() == ""


def test_closed_pipe_gives_no_traceback():
    cmd = (f"{sys.executable} -m dpemb.cli.main account --population 100000 --clients-per-round 64 "
           "--rounds 100 --noise-multiplier 1.0,1.1,1.2,1.3,1.4,1.5 | head -c 10")
    res = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in res.stderr and "BrokenPipe" not in res.stderr, res.stderr


def test_help_starts_fast_without_torch():
    code = ("import sys, time; t = time.perf_counter(); from dpemb.cli.main import build_parser; "
            "build_parser(); print(time.perf_counter() - t); print('torch' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    seconds, torch_loaded = res.stdout.split()
    assert torch_loaded == "False", "building the CLI parser must not import torch"
    print(f"parser built in {float(seconds):.2f} s")  # timing is measured, not asserted (bench/)
