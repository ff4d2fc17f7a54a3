"""Map which CPU convolutions oneDNN gets wrong on THIS machine: crashes, hangs, wrong results.

PyTorch's oneDNN 1x1 convolution with a stride (oneDNN's "rtus" path: it first copies the
strided pixels into a per-thread workspace) sizes that workspace for the input's channels
but, for a channels-last ("nxc", oneDNN tag ``acdb``) input, advances through it by the
ISA's channel block. When the input has fewer channels than the block (8 on AVX2, 16 on
AVX-512), backward_weights writes past the workspace: heap corruption (glibc's
``double free or corruption``, ``free(): invalid next size``), a segmentation fault, both
threads spinning for ever, or weight gradients that are silently wrong. Upstream:
uxlfoundation/oneDNN issue #6035. See docs/SCALE.md, "oneDNN's strided 1x1 backward".

This script runs a grid of single convolutions (pass x kernel x stride x input channels x
batch x memory format x threads), each repeated ``--repeats`` times in a child process with
``MALLOC_CHECK_=3``, and compares every result against a float64 computation with oneDNN
off. A case is ``ok``, ``wrong`` (relative error above 1e-3), ``hang`` (no answer within
``--timeout`` s) or ``signal N`` (the child died). After any failure the child is
replaced; at the end every failure is run again alone in a fresh child, because a case
that damages the heap quietly can make the next one fail: only failures that recur
alone count.

    python tools/onednn_conv_map.py                 # the whole grid (about 4 min on 2 cores)
    python tools/onednn_conv_map.py --quick         # the classes that matter (about 1 min)
    python tools/onednn_conv_map.py --out map.json  # also write every case as JSON

It prints the torch and oneDNN versions, the CPU and the ISA oneDNN dispatches to, then
one line per case that is not ``ok`` and a summary per class: what an upstream report
needs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

PASSES = ("forward", "backward_data", "backward_weights")
OUT_CHANNELS = 16
SIDE = 28


@dataclass(frozen=True)
class Case:
    direction: str
    kernel: int
    stride: int
    in_channels: int
    batch: int
    memory_format: str  # "nchw" or "nhwc" (channels-last)
    threads: int


def grid(quick: bool) -> list[Case]:
    if quick:
        axes = dict(direction=PASSES, kernel=(1, 3), stride=(1, 2), in_channels=(4, 8, 16),
                    batch=(3, 4), memory_format=("nchw", "nhwc"), threads=(1, 2))
    else:
        axes = dict(direction=PASSES, kernel=(1, 3), stride=(1, 2), in_channels=(1, 2, 4, 8, 16, 32),
                    batch=(1, 2, 3, 4, 8), memory_format=("nchw", "nhwc"), threads=(1, 2))
    return [Case(*values) for values in itertools.product(*axes.values())]


# ------------------------------------------------------------------------------ child
def run_case(case: Case, repeats: int) -> float:
    """Largest relative error of oneDNN's result against float64 without oneDNN."""
    import copy

    import torch

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(case.in_channels, OUT_CHANNELS, case.kernel, stride=case.stride,
                           padding=case.kernel // 2, bias=False)
    x = torch.randn(case.batch, case.in_channels, SIDE, SIDE)
    if case.memory_format == "nhwc":
        x = x.contiguous(memory_format=torch.channels_last)

    def compute(module, inp):
        inp = inp.detach().requires_grad_(case.direction == "backward_data")
        module.weight.requires_grad_(case.direction == "backward_weights")
        module.weight.grad = None
        with torch.set_grad_enabled(case.direction != "forward"):
            out = module(inp)
            if case.direction == "forward":
                return out.detach()
            out.sum().backward()
        return (inp.grad if case.direction == "backward_data" else module.weight.grad).detach()

    with torch.backends.mkldnn.flags(enabled=False):
        reference = compute(copy.deepcopy(conv).double(), x.double())
    worst = 0.0
    for _ in range(repeats):
        got = compute(conv, x).double()
        worst = max(worst, ((got - reference).abs().max() / reference.abs().max().clamp_min(1e-30)).item())
    return worst


def child_main(threads: int, repeats: int) -> None:
    import torch

    torch.set_num_threads(threads)
    print("ready", flush=True)
    for line in sys.stdin:
        case = Case(**json.loads(line))
        error = run_case(case, repeats)
        print(f"done {error!r}", flush=True)


# ----------------------------------------------------------------------------- parent
class Child:
    """A worker interpreter with ``threads`` torch threads and glibc's heap checks on."""

    def __init__(self, threads: int, repeats: int):
        env = {**os.environ, "MALLOC_CHECK_": "3", "OMP_NUM_THREADS": str(threads)}
        self.proc = subprocess.Popen([sys.executable, __file__, "--child", str(threads), "--repeats", str(repeats)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env, start_new_session=True)
        assert self.proc.stdout
        ready, _, _ = select.select([self.proc.stdout], [], [], 300)  # importing torch, not a case
        if not ready or self.proc.stdout.readline().strip() != "ready":
            self.kill()
            raise SystemExit("a child interpreter could not import torch within 300 s")

    def ask(self, case: Case, timeout: float) -> tuple[str, float | None]:
        assert self.proc.stdin and self.proc.stdout
        try:
            self.proc.stdin.write(json.dumps(asdict(case)) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._dead()
        # one line per case, so nothing waits in the reader's buffer while select() waits
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.kill()
            return "hang", None
        line = self.proc.stdout.readline()
        if not line.startswith("done "):
            return self._dead()
        error = float(line.split()[1])
        return ("ok" if error <= 1e-3 else "wrong"), error

    def _dead(self) -> tuple[str, None]:
        code = self.proc.wait()
        return (f"signal {-code} ({signal.Signals(-code).name})" if code < 0 else f"exit {code}"), None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def describe_machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        vendor = re.search(r"vendor_id\s*:\s*(.*)", text)
        model = re.search(r"model name\s*:\s*(.*)", text)
        cpu = " / ".join(m.group(1).strip() for m in (vendor, model) if m)
    except OSError:
        pass
    onednn = re.search(r"MKL-DNN (v[\d.]+)", torch.__config__.show())
    probe = "import torch; c = torch.nn.Conv2d(8, 16, 1); c(torch.randn(3, 8, 28, 28))"
    verbose = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             env={**os.environ, "ONEDNN_VERBOSE": "1"})
    verbose = verbose.stdout + verbose.stderr
    isa = re.search(r"isa:(.*)", verbose)
    return {"torch": torch.__version__, "onednn": onednn.group(1) if onednn else "unknown", "cpu": cpu,
            "onednn_isa": isa.group(1).strip() if isa else "unknown", "cores": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller grid around the known classes")
    parser.add_argument("--repeats", type=int, default=10, help="times each case runs in its child (default 10)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a case counts as a hang")
    parser.add_argument("--out", help="write the machine and every case to this JSON file")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child_main(args.child, args.repeats)
        return 0

    machine = describe_machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in machine.items()), flush=True)
    cases = grid(args.quick)
    results: list[dict] = []
    children: dict[int, Child] = {}
    started = time.monotonic()
    for i, case in enumerate(cases):
        child = children.get(case.threads)
        if child is None or not child.alive():
            child = children[case.threads] = Child(case.threads, args.repeats)
        status, error = child.ask(case, args.timeout)
        if status != "ok":  # its heap may be damaged: the next case gets a fresh child
            child.kill()
        results.append({**asdict(case), "status": status, "relative_error": error})
        if (i + 1) % 100 == 0:
            print(f"[{i + 1}/{len(cases)} cases, {time.monotonic() - started:.0f} s]", flush=True)
    for child in children.values():
        child.kill()

    # A case that damages the heap without failing can make the NEXT case in the same
    # child fail: every failure is tried again, alone, in a fresh child, and counts only
    # if it fails there too.
    for r in results:
        if r["status"] == "ok":
            continue
        case = Case(**{k: r[k] for k in asdict(cases[0])})
        alone = Child(case.threads, args.repeats)
        r["first_status"] = r["status"]
        r["status"], r["relative_error"] = alone.ask(case, args.timeout)
        alone.kill()
        if r["status"] == "ok":
            r["status"] = "ok alone"
        print(f"  {r['status']:22s} {describe(case)}" + (f"  (relative error {r['relative_error']:.3g})"
              if r["relative_error"] else "") + f"  [in the sweep: {r['first_status']}]", flush=True)

    failed = [r for r in results if r["status"] not in ("ok", "ok alone")]
    print(f"\n{len(cases)} cases in {time.monotonic() - started:.0f} s; {len(failed)} fail alone; "
          f"{sum(r['status'] == 'ok alone' for r in results)} failed only after another case.")
    print_summary(results)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": machine, "cases": results}, f, indent=1)
        print(f"wrote {args.out}")
    return 0


def describe(case: Case) -> str:
    return (f"{case.direction:16s} k{case.kernel} s{case.stride} ic{case.in_channels:<2d} "
            f"mb{case.batch} {case.memory_format} threads {case.threads}")


def print_summary(results: list[dict]) -> None:
    """Bad cases per (direction, kernel, stride, memory format): which channel counts fail."""
    print("\n| direction | kernel | stride | format | cases | fail alone | input channels |")
    print("|---|---|---|---|---|---|---|")
    key = lambda r: (r["direction"], r["kernel"], r["stride"], r["memory_format"])  # noqa: E731
    for k, group in itertools.groupby(sorted(results, key=key), key=key):
        group = list(group)
        bad = [r for r in group if r["status"] not in ("ok", "ok alone")]
        channels = sorted({r["in_channels"] for r in bad})
        print(f"| {k[0]} | {k[1]}x{k[1]} | {k[2]} | {k[3]} | {len(group)} | {len(bad)} | "
              f"{', '.join(map(str, channels)) or '-'} |")


if __name__ == "__main__":
    sys.exit(main())
