"""Every documented command line works (issue #34 item 11): the `dpemb` commands in the
code blocks (fenced or indented) of README.md and docs/*.md (found by ``tests/cli/doc_commands.py``)

- parse with dpemb's own argparse parser: the subcommand, every flag and every choice
  exist (fast, in ``make test``); the ``dpemb ...`` code spans of the prose name existing
  subcommands, flags and choices;
- run at toy size, in a temporary directory, through ``dpemb.cli.main.main``: the paths
  the docs use (data/glyphs, runs/pre, runs/fedemb, photos/, lfw/, train.npz, ...) are
  made there by the README's own commands at toy size or by small stand-ins
  (``STAND_INS``, ``workspace``), and toy sizes replace the docs' (``toy``);
- except the commands of ``CANNOT_RUN_HERE``, each with its reason (those that only need a
  GPU run where torch sees one). Every extracted command is run or listed there (a new
  documented command is run by default), and every entry there is still documented;
- and every "(default: X)" in dpemb's --help is the parser's default.

The commands of a doc file run in its order in one copy of the workspace (later
commands read what earlier ones wrote, as a reader following the page would); a failure
names the doc file and line and shows the command's output. The commands that take
seconds even at toy size (``SLOW``) run in ``make test-slow``, the others in ``make test``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from tests.cli.doc_commands import (
    ROOT,
    DocCommand,
    block_commands,
    build_parser,
    doc_files,
    fragment_problem,
    inline_commands,
    parse_problem,
    subparsers_of,
    unbracket,
)
from tests.data.test_importers import make_fashion_fixture

COMMANDS = block_commands()

#: documented commands that cannot run here, and why (matched on the command's text)
NEEDS_A_GPU = "needs a GPU (run where torch sees one)"
CANNOT_RUN_HERE = {
    "dpemb train ... --device cuda": NEEDS_A_GPU,
    "torchrun --nproc-per-node 8 -m dpemb train --data data/faces --out runs/big --algorithm dp-fedemb "
    "--init runs/pre --target-epsilon 2 --clients-per-round 256": "torchrun with 8 processes (and the faces "
    "data at full size); tests/cli/test_distributed_commands.py runs `dpemb train` under torchrun at toy size",
    "torchrun --nproc-per-node 8 -m dpemb train ... --device cuda --client-batch 64": "8 GPUs",
    "torchrun --nproc-per-node 4 -m dpemb train ... --device cuda": "4 GPUs",
    "torchrun --nproc-per-node 8 -m dpemb eval runs/big --data data/faces --device cuda": "8 GPUs",
    "torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 --rdzv-id myrun "
    "-m dpemb train ... --out /shared/runs/big": "4 machines with 8 GPUs each",
    "torchrun --nproc-per-node 8 --max-restarts 3 --rdzv-backend c10d --rdzv-endpoint localhost:29500 "
    "-m dpemb train ... --resume auto": "torchrun with 8 processes and a process killed mid-run "
    "(tests/cli/test_distributed_commands.py restarts a toy job)",
    "torchrun --nproc-per-node 8 -m dpemb embed runs/big data/faces --out faces.npy --device cuda": "8 GPUs "
    "(tests/cli/test_distributed_commands.py runs embed, eval and features under torchrun at toy size)",
    "torchrun --nproc-per-node 8 -m dpemb features --data data/faces:train --backbone-model runs/big "
    "--out train.npz --device cuda": "8 GPUs",
}

#: operands of the docs that stand for something the reader has; here, toy stand-ins
STAND_INS = {
    "DS": "data/glyphs",
    "DIR": "data/glyphs",
    "NEW": "data/resplit",
    "SUB": "data/subsample",
    "F.npz": "train.npz",
    "T.npz": "test.npz",
    "data/api-glyphs": "data/glyphs",  # docs/API.md's Python code saves it
}
#: Fashion-MNIST is not installed on every test machine: `dpemb features --data
#: fashion-mnist:...` reads a toy copy (300 + 100 random images) here, named by this variable
FASHION_MNIST_ENV = "DPEMB_FASHION_MNIST_DIR"

#: the README commands that make the shared workspace (run once, by the fixture)
MAKES_WORKSPACE = ("dpemb data make glyphs --out data/glyphs", "dpemb train --data data/glyphs --out runs/central",
                   "dpemb train --data data/glyphs --out runs/pre", "dpemb train --data data/glyphs --out runs/fedemb")

TOY_USERS, TOY_IDENTITIES = "40", 10
CENTRAL_TOY = {"--steps": "2", "--batch-size": "16", "--eval-every": "2", "--eval-max-pairs": "1000"}
FEDERATED_TOY = {"--rounds": "2", "--eval-every": "2", "--clients-per-round": "4", "--users-per-client": "2",
                 "--local-batch-size": "16", "--eval-max-pairs": "1000"}
TOY_CANARIES = "20"


def _set(argv: list[str], flag: str, value: str | None = None) -> None:
    """Replace ``flag``'s value in ``argv`` (or add the flag); a switch when value is None."""
    if flag in argv:
        if value is not None:
            argv[argv.index(flag) + 1] = value
    else:
        argv += [flag] if value is None else [flag, value]


def _flags(argv: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``--flag value`` pairs of an argv (a switch maps to '')."""
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            out[argv[i]] = argv[i + 1] if has_value else ""
            i += 2 if has_value else 1
        else:
            i += 1
    return out


def _documented(prefix: str) -> DocCommand:
    return next(c for c in COMMANDS if c.path == "README.md" and c.text.startswith(prefix))


def base_of(cmd: DocCommand) -> DocCommand:
    """The command whose flags ``...`` stands for in ``cmd``: the nearest earlier command
    of the same file with the same subcommand (``train`` for ``audit``) and no ``...``, else
    the file's first such, else the README's DP-FedEmb run (``train``) or last such."""
    kind = "train" if cmd.subcommand == "audit" else cmd.subcommand
    same = [c for c in COMMANDS if c.subcommand == kind and "..." not in c.argv and c.launcher != "torchrun"]
    here = [c for c in same if c.path == cmd.path]
    before = [c for c in here if c.line < cmd.line]
    readme = [c for c in same if c.path == "README.md"]
    fedemb = [c for c in readme if c.text.startswith(MAKES_WORKSPACE[-1])]  # not a recipe's run further down
    return before[-1] if before else here[0] if here else (fedemb or readme)[-1]


def expand(cmd: DocCommand) -> list[str]:
    """``cmd``'s argv with stand-ins, ``[optional flags]`` given, and ``...`` filled with
    the flags of ``base_of(cmd)`` that ``cmd`` does not give (without --noise-multiplier
    when ``cmd`` calibrates with --target-epsilon), writing to an --out of its own unless
    it resumes."""
    argv = [STAND_INS.get(w, w) for w in unbracket(" ".join(cmd.argv)).split()]
    if "..." not in argv:
        return argv
    i = argv.index("...")
    given = _flags(argv[:i] + argv[i + 1:])
    base = _flags(base_of(cmd).argv)
    if "--target-epsilon" in given:
        base.pop("--noise-multiplier", None)
    if "--out" in base and "--resume" not in given:
        base["--out"] = f"{base['--out'].rstrip('/')}-{cmd.path.split('/')[-1]}-{cmd.line}"
    filler = [w for flag, value in base.items() if flag not in given for w in ([flag, value] if value else [flag])]
    return argv[:i] + filler + argv[i + 1:]


def toy(argv: list[str]) -> list[str]:
    """``argv`` at toy size: few users and identities, 2 steps or rounds, small
    evaluations, 20 canaries, a 200-example feature extraction; no progress bars."""
    argv = list(argv)
    if argv[:3] == ["data", "make", "glyphs"]:
        _set(argv, "--users", TOY_USERS)
        ipu = int(_flags(argv).get("--identities-per-user", TOY_IDENTITIES))
        _set(argv, "--identities-per-user", str(min(ipu, TOY_IDENTITIES)))
        for flag in ("--eval-identity-fraction", "--validation-identity-fraction", "--public-user-fraction"):
            if flag in argv:  # a share sized for 100,000 users holds no one of 40
                _set(argv, flag, str(max(float(_flags(argv)[flag]), 0.1)))
    if argv[:2] == ["data", "make"]:
        _set(argv, "--no-progress")
    if argv[:2] == ["data", "subsample"]:
        _set(argv, "--train-users", "5")
    if argv[0] in ("train", "audit"):
        recipe = _flags(argv).get("--recipe")
        algorithm = "centralized"
        if recipe:  # a recipe's algorithm, and its extrapolation accepted (to 1,000 users: cheap to calibrate)
            from dpemb.training.recipes import load_recipe

            config, info = load_recipe(recipe)
            algorithm = config.algorithm
            if info.extrapolates and "--target-population" not in argv:
                # (an audit adds 1,000 canary users to the population)
                _set(argv, "--target-population", "5000" if argv[0] == "audit" else "1000")
        central = argv[0] == "train" and _flags(argv).get("--algorithm", algorithm) == "centralized"
        for flag, value in (CENTRAL_TOY if central else FEDERATED_TOY).items():
            _set(argv, flag, value)
        for flag in ("--audit-canaries", "--canaries"):
            if flag in argv:
                _set(argv, flag, TOY_CANARIES)
        _set(argv, "--no-progress")
    if argv[0] == "eval" and "--data" in argv:
        _set(argv, "--bootstrap", "20")
    if argv[0] == "features":
        _set(argv, "--limit", "200")
        _set(argv, "--quiet")
    return argv


def run_here(cmd: DocCommand, capsys: pytest.CaptureFixture[str]) -> str | None:
    """Run ``cmd`` at toy size in the current directory; None if it exits 0, else what
    went wrong (with the end of its output)."""
    from dpemb.cli.main import main as dpemb

    argv = toy(expand(cmd))
    try:
        status = dpemb(argv)
    except SystemExit as e:  # argparse or a command's own exit
        status = e.code
    except Exception as e:  # noqa: BLE001  (reported with the doc line)
        status = f"{type(e).__name__}: {e}"
    out = capsys.readouterr()
    if status == 0:
        return None
    tail = "\n".join((out.out + out.err).strip().splitlines()[-15:])
    return f"{cmd}\n    ran: dpemb {' '.join(argv)}\n    exit: {status}\n    {tail}"


# ------------------------------------------------------------------------------ extraction
def test_extractor_finds_the_documented_commands():
    files = {c.path for c in COMMANDS}
    assert len(COMMANDS) >= 60, [str(c) for c in COMMANDS]
    assert {"README.md", "docs/AUDIT.md", "docs/DATA.md", "docs/EVALUATION.md", "docs/MODELS.md",
            "docs/PRIVACY.md", "docs/SCALE.md", "docs/TRANSFER.md"} <= files
    assert all("\\" not in c.text and " #" not in c.text for c in COMMANDS)
    texts = {c.text for c in COMMANDS}
    # a continued line, a comment stripped, a torchrun line continued over two lines
    assert "dpemb data make glyphs --out data/faces --regime owned --users 2000 --identities-per-user 1 " \
           "--images-per-identity 8" in texts
    assert "dpemb eval runs/fedemb --data data/glyphs --roc roc.png" in texts
    assert any(c.launcher == "torchrun" and c.argv[:1] == ("train",) and "--rdzv-id" in c.text for c in COMMANDS)
    assert len(inline_commands()) >= 50


def test_extractor_rules(tmp_path):
    md = tmp_path / "x.md"
    md.write_text(
        "Prose `dpemb train --steps 3` and `dpemb.cli.main`.\n"
        "```sh\n"
        "$ dpemb train --data D \\\n"
        "    --out R   # a comment\n"
        "python -m dpemb account --population 10\n"
        "torchrun --nproc-per-node 2 -m dpemb eval R --data D\n"
        "dpemb eval: error: output, not a command\n"
        "echo dpemb train\n"
        "```\n"
        "```python\n"
        "dpemb train --in-python-code\n"
        "```\n"
        "dpemb data make glyphs   (outside a block)\n"
        "\n"
        "    dpemb export R \\\n"
        "        --out D\n"
        "    dpemb embed R x.png --out e.npy\n"
        "\n"
        "- a list item\n"
        "  dpemb not-code (list text)\n"
    )
    got = block_commands([md], root=tmp_path)
    assert [(c.line, c.launcher, c.argv) for c in got] == [
        (3, "dpemb", ("train", "--data", "D", "--out", "R")),
        (5, "python -m", ("account", "--population", "10")),
        (6, "torchrun", ("eval", "R", "--data", "D")),
        (15, "dpemb", ("export", "R", "--out", "D")),
        (17, "dpemb", ("embed", "R", "x.png", "--out", "e.npy")),
    ]
    assert [(c.line, c.argv) for c in inline_commands([md], root=tmp_path)] == [(1, ("train", "--steps", "3"))]


# ------------------------------------------------------------------------------ parsing
def test_every_documented_command_parses():
    parser = build_parser()
    problems = [f"{c}\n    {p}" for c in COMMANDS if (p := parse_problem(c, parser))]
    assert not problems, "documented commands that dpemb's parser refuses:\n" + "\n".join(problems)


def test_every_command_named_in_the_prose_exists():
    parser = build_parser()
    problems = [f"{c}\n    {p}" for c in inline_commands() if (p := fragment_problem(c, parser))]
    assert not problems, "commands named in the docs' prose that dpemb does not have:\n" + "\n".join(problems)


def test_parse_check_catches_wrong_commands():
    """The checks fail on the kinds of mistake the docs have made."""
    parser = build_parser()

    def doc(text: str, launcher: str = "dpemb") -> DocCommand:
        return DocCommand("x.md", 1, text, tuple(text.split()[1:]), launcher)

    assert "invalid choice: 'import'" in parse_problem(doc("dpemb data import tree ROOT --out DIR"), parser)
    assert "unrecognized arguments: --no-such-flag" in parse_problem(
        doc("dpemb train --data D --out R --no-such-flag 1"), parser)
    assert "invalid choice" in parse_problem(doc("dpemb export RUN --out D --format tflite"), parser)
    assert parse_problem(doc("dpemb data split DIR [--out NEW] [split flags as above]"), parser) is None
    assert parse_problem(doc("dpemb data inspect DIR --grid-users N"), parser) is None  # N for an int
    assert parse_problem(doc("dpemb train ... --steps N"), parser) is None  # ... for the required flags
    assert "no subcommand 'import'" in fragment_problem(doc("dpemb data import X", "inline"), parser)
    assert "no flag --formats" in fragment_problem(doc("dpemb export --formats", "inline"), parser)
    assert "'valid'" in fragment_problem(doc("dpemb train --eval-split valid|test", "inline"), parser)


def _all_parsers(p: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield p
    for sub in subparsers_of(p).values():
        yield from _all_parsers(sub)


def test_help_states_the_parsers_defaults():
    """A flag's help that says "default: X" (or "default X") says the value argparse uses
    (where argparse holds one: a None default leaves it to the library)."""
    wrong = []
    for p in _all_parsers(build_parser()):
        for a in p._actions:
            if not a.help or a.help == argparse.SUPPRESS or a.default in (None, argparse.SUPPRESS) \
                    or a.nargs == 0:  # switches: "default: invert" describes behaviour
                continue
            text = a.help % {**vars(a), "prog": p.prog} if "%(" in a.help else a.help
            m = re.search(r"default:?\s+([^\s,;)]+)", text, re.I)
            if not m:
                continue
            said = m.group(1).rstrip(".:")
            same = said == str(a.default)
            try:
                same = same or float(said) == float(a.default)
            except (TypeError, ValueError):
                pass
            if not same:
                wrong.append(f"{p.prog} {'/'.join(a.option_strings) or a.dest}: help says {said!r}, "
                             f"the default is {a.default!r}")
    assert not wrong, "\n".join(wrong)


# ------------------------------------------------------------------------------ running
def test_every_command_is_run_or_listed_as_not_runnable():
    texts = {c.text for c in COMMANDS}
    for table in ("CANNOT_RUN_HERE", "SLOW"):
        stale = sorted(set(globals()[table]) - texts)
        assert not stale, f"{table} lists commands no doc shows any more: {stale}"
    assert not set(CANNOT_RUN_HERE) & set(SLOW)
    for c in COMMANDS:
        if c.text in CANNOT_RUN_HERE and CANNOT_RUN_HERE[c.text] != NEEDS_A_GPU:
            continue
        assert c.launcher != "torchrun", f"{c}: a torchrun command runs here only if listed with a reason"
        argv = toy(expand(c))  # every runnable command has its toy form
        assert "..." not in argv and not any(w in STAND_INS for w in argv), (str(c), argv)
    for prefix in MAKES_WORKSPACE:
        _documented(prefix)


def _write_png(path: Path, img: np.ndarray) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img[:, :, 0] if img.shape[2] == 1 else img).save(path)


def _stand_ins(ws: Path) -> None:
    """photos/ (+ photos.csv, my_pairs.csv), lfw/, ijb/, runs/old, a toy Fashion-MNIST
    (fashion-mnist/), train.npz and test.npz (its features), mine.npz and new.npz: small
    files in the formats the docs describe."""
    from dpemb.cli.main import main as dpemb
    from dpemb.data.dataset import UserDataset

    ds = UserDataset.load(ws / "data/glyphs")
    labels = np.asarray(ds.labels)
    rows, people = ["path,user,label"], {}
    counts = np.bincount(labels)
    for lab in [lab for lab in range(len(counts)) if counts[lab] >= 4][:12]:  # 12 identities, 4 images each
        idx = np.flatnonzero(labels == lab)[:4]
        name = f"id{lab}"
        people[name] = len(idx)
        for k, j in enumerate(idx, start=1):
            _write_png(ws / "photos" / name / f"{k}.png", ds.images[j])
            _write_png(ws / "lfw/lfw-deepfunneled" / name / f"{name}_{k:04d}.jpg", ds.images[j])
            _write_png(ws / "ijb/crops" / name / f"{k}.png", ds.images[j])
            rows.append(f"photos/{name}/{k}.png,u{k % 3},{name}")
    (ws / "photos.csv").write_text("\n".join(rows) + "\n")
    names = sorted(people)
    pairs = ["2\t2"]  # LFW pairs.txt: 2 folds of 2 genuine + 2 impostor pairs
    for f in range(2):
        pairs += [f"{names[f]}\t1\t2", f"{names[f + 1]}\t2\t3",
                  f"{names[f]}\t1\t{names[f + 2]}\t1", f"{names[f + 1]}\t3\t{names[f + 2]}\t2"]
    (ws / "lfw/pairs.txt").write_text("\n".join(pairs) + "\n")
    (ws / "my_pairs.csv").write_text("path1,path2,same\n" + "".join(
        f"{a}/1.png,{a}/2.png,1\n{a}/3.png,{b}/1.png,0\n" for a, b in zip(names, names[1:] + names[:1])))
    templates = ["template_id,path,subject"] + [f"t{n}{h},{n}/{k}.png,{n}" for n in names for h in (0, 1)
                                                for k in (1 + 2 * h, 2 + 2 * h)]
    (ws / "ijb/templates.csv").write_text("\n".join(templates) + "\n")
    (ws / "ijb/pairs.csv").write_text("template1,template2,same\n" + "".join(
        f"t{a}0,t{a}1,1\nt{a}0,t{b}1,0\n" for a, b in zip(names, names[1:] + names[:1])))
    shutil.copytree(ws / "runs/fedemb", ws / "runs/old")
    make_fashion_fixture(ws / "fashion-mnist", n_train=300, n_test=100)
    for split in ("train", "test"):
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(FASHION_MNIST_ENV, str(ws / "fashion-mnist"))
            assert dpemb(["features", "--data", f"fashion-mnist:{split}", "--limit", "200", "--quiet",
                          "--out", f"{split}.npz"]) == 0
    rng = np.random.default_rng(0)  # docs/TRANSFER.md, "Your own features", smaller
    y = rng.integers(0, 3, 240)
    X = rng.normal(size=(240, 16)).astype(np.float32) + 3 * np.eye(3, 16, dtype=np.float32)[y]
    np.savez(ws / "mine.npz", X=X[:200], y=y[:200], label_names=np.array(["cat", "dog", "fox"]))
    np.savez(ws / "new.npz", X=X[200:])


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding what the docs' commands read: the README's toy dataset and runs
    (made by its own commands at toy size) and the stand-ins of ``_stand_ins``."""
    ws = tmp_path_factory.mktemp("docs-workspace")
    cwd = os.getcwd()
    os.chdir(ws)
    try:
        capture = _NoCapture()
        for prefix in MAKES_WORKSPACE:
            problem = run_here(_documented(prefix), capture)  # type: ignore[arg-type]
            assert problem is None, problem
        _stand_ins(ws)
    finally:
        os.chdir(cwd)
    return ws


class _NoCapture:
    """``run_here``'s capsys outside a test: the output is not kept."""

    class _Out:
        out = err = ""

    def readouterr(self) -> "_NoCapture._Out":
        return self._Out()


#: documented commands that take seconds even at toy size, run by `make test-slow`:
#: seconds measured on the shared 2-core machine
SLOW = {
    # calibrating z to a target epsilon
    "dpemb train ... --target-epsilon 2": 4.0,
    "dpemb train --data data/api-glyphs --out runs/api-cli --algorithm dp-fedemb --target-epsilon 8 --rounds 4 "
    "--clients-per-round 4 --users-per-client 2 --eval-every 4": 5.2,  # tests/test_api_doc.py runs it too
    "dpemb account --population 3000 --clients-per-round 32 --rounds 100 --target-epsilon 8 "
    "--extrapolate-to 10000000": 3.9,
    "dpemb account ... --target-epsilon 3.9": 5.5,
    "dpemb account ... --target-epsilon 1 --target-population 100000": 5.0,
    "dpemb account --config runs/fedemb/private/config.json --target-epsilon 4": 3.0,
    "dpemb train ... --audit-canaries 1000": 2.0,
    "dpemb audit --data data/glyphs --out runs/audit --init runs/pre --noise-multiplier 0.5 --canaries 10000": 3.3,
    "dpemb transfer ... --audit-canaries 1000": 2.7,
    "dpemb audit --data DS --out runs/audit --noise-multiplier 2 --canaries 1000 ...": 9.3,
    "dpemb audit --black-box --data DS --out runs/audit-bb --noise-multiplier 2 --canaries 1000 ...": 2.4,
    # DP-LS on 1280-dimensional features (eigendecompositions, class Gramians)
    "dpemb transfer --train F.npz --test T.npz --method dp-ls --epsilon 1 --audit-canaries 1000": 22.1,
    "dpemb transfer --train train.npz --test test.npz --method dp-ls --epsilon 1": 9.6,
    "dpemb transfer --train train.npz --test test.npz --method non-private,dp-ls,dp-fc,dp-sgd "
    "--sweep-epsilon 0.1,1,8 --json out.json --plot out.png": 29.4,
    "dpemb account --population 10000000 --clients-per-round 1024,4096,16384,65536 --users-per-client 1 "
    "--rounds 1000,2000,5000,10000 --target-epsilon 3.9,5.6 --accountant rdp --delta 1e-7 --allow-large-delta":
    22.9,  # 32 calibrations
}


def run_documented(workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                   capsys: pytest.CaptureFixture[str], slow: bool) -> None:
    """Run the runnable documented commands (the SLOW ones, or the others), each doc file's
    in its order in its own copy of the workspace; fail naming every command that failed."""
    import torch

    made = {_documented(p) for p in MAKES_WORKSPACE}
    runnable = lambda c: c.text not in CANNOT_RUN_HERE or (  # noqa: E731
        CANNOT_RUN_HERE[c.text] == NEEDS_A_GPU and torch.cuda.is_available())
    failures = []
    for path in sorted({c.path for c in COMMANDS}):
        todo = [c for c in COMMANDS if c.path == path and runnable(c) and c not in made and (c.text in SLOW) == slow]
        if not todo:
            continue
        ws = tmp_path / path.replace("/", "_")
        shutil.copytree(workspace, ws, symlinks=True)
        monkeypatch.chdir(ws)
        monkeypatch.setenv(FASHION_MNIST_ENV, str(ws / "fashion-mnist"))
        failures += [p for c in todo if (p := run_here(c, capsys))]
    assert not failures, "documented commands that fail at toy size:\n" + "\n\n".join(failures)


def test_documented_commands_run_at_toy_size(workspace, tmp_path, monkeypatch, capsys):
    run_documented(workspace, tmp_path, monkeypatch, capsys, slow=False)


@pytest.mark.slow
@pytest.mark.timeout(900)  # 100 s alone on the shared 2 cores, 250 s beside other tests
def test_slow_documented_commands_run_at_toy_size(workspace, tmp_path, monkeypatch, capsys):
    run_documented(workspace, tmp_path, monkeypatch, capsys, slow=True)


def test_doc_files_are_the_ones_searched():
    assert doc_files()[0] == ROOT / "README.md" and len(doc_files()) > 10
