"""The `dpemb` command lines of the documentation, found and checked against the real parser.

`block_commands` finds every command line in the code blocks (fenced, or indented by four
spaces) of README.md and docs/*.md: ``dpemb ...``, ``python -m dpemb ...`` and ``torchrun ... -m dpemb ...``, with
backslash continuations joined and trailing ``# comments`` stripped. `inline_commands`
finds the ``dpemb SUBCOMMAND ...`` code spans of the prose (synopses and fragments).

`parse_problem` parses a command of a code block with the parser that ``dpemb`` itself builds
(``dpemb.cli.main.build_parser``) and returns argparse's complaint (or None), never a
SystemExit: the subcommand must exist, every flag must exist, every choice must be
valid. Placeholders (``DIR``, ``RUN``, ``N``, ``...``) stand in for values; a placeholder
given to a typed flag is replaced by a value of that type. `fragment_problem` checks a
prose fragment more leniently: its subcommand and flags must exist and any value given
to a flag with choices must be one of them, but missing required arguments are fine.
"""

from __future__ import annotations

import argparse
import re
import shlex
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]

#: fenced blocks with these info strings hold code of another language, not command lines
NOT_SHELL = {"python", "py", "pycon", "json", "csv", "toml", "yaml", "yml", "ini"}


@dataclass(frozen=True)
class DocCommand:
    """One documented command line. ``argv`` is what follows ``dpemb`` (the program's own
    arguments); ``launcher`` is ``dpemb``, ``python -m`` or ``torchrun``."""

    path: str  # relative to the repository root, e.g. docs/AUDIT.md
    line: int  # 1-based line of the command's first physical line
    text: str  # the command as one line, continuations joined, comment stripped
    argv: tuple[str, ...]
    launcher: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def subcommand(self) -> str:
        return self.argv[0] if self.argv else ""

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md, in that order."""
    return [root / "README.md"] + sorted((root / "docs").glob("*.md"))


def strip_comment(line: str) -> str:
    """The line without a trailing shell comment (``#`` at the start or after a blank)."""
    return re.split(r"(?:^|\s)#", line, maxsplit=1)[0].rstrip()


def _split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unbalanced quote in a synopsis: plain words
        return text.split()


def command_argv(text: str) -> tuple[str, tuple[str, ...]] | None:
    """(launcher, argv after ``dpemb``) if ``text`` runs dpemb, else None. Lines that show
    dpemb's output (``dpemb eval: error: ...``) are not commands."""
    words = _split(text)
    if words[:1] == ["$"]:
        words = words[1:]
    if not words:
        return None
    if words[0] == "dpemb":
        launcher, argv = "dpemb", words[1:]
    elif re.fullmatch(r"(\S*/)?python[0-9.]*", words[0]) and words[1:3] in (["-m", "dpemb"],
                                                                          ["-m", "dpemb.cli.main"]):
        launcher, argv = "python -m", words[3:]
    elif words[0] == "torchrun" and "-m" in words:
        i = words.index("-m")
        if words[i + 1 : i + 2] not in (["dpemb"], ["dpemb.cli.main"]):
            return None
        launcher, argv = "torchrun", words[i + 2 :]
    else:
        return None
    if argv and argv[0].endswith(":"):  # output, e.g. "dpemb eval: error: ..."
        return None
    return launcher, tuple(argv)


def block_commands(files: list[Path] | None = None, root: Path = ROOT) -> list[DocCommand]:
    """Every dpemb command line in the code blocks of ``files`` (default: README.md and
    docs/*.md), in file order: fenced blocks (except those tagged with another language,
    ``NOT_SHELL``) and blocks indented by four spaces."""
    found: list[DocCommand] = []
    for f in files if files is not None else doc_files(root):
        lines = f.read_text(encoding="utf-8").splitlines()
        fence: str | None = None  # the open fence ("```" or "~~~"), None outside a block
        shell, in_indented = True, False
        i = 0
        while i < len(lines):
            stripped = lines[i].strip()
            m = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if m and (fence is None or stripped.startswith(fence)):
                if fence is None:
                    fence, shell = m.group(1), m.group(2).lower() not in NOT_SHELL
                else:
                    fence = None
                i += 1
                continue
            # an indented code block: 4+ spaces, after a blank line or more of the block
            indented = fence is None and lines[i].startswith("    ") and stripped and (
                i == 0 or not lines[i - 1].strip() or in_indented)
            in_indented = bool(indented)
            if not indented and (fence is None or not shell):
                i += 1
                continue
            start, text = i, lines[i].rstrip()
            while text.endswith("\\") and i + 1 < len(lines):  # a continuation
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            i += 1
            text = " ".join(strip_comment(text).split())
            parsed = command_argv(text) if text else None
            if parsed is not None:
                rel = f.relative_to(root).as_posix() if f.is_relative_to(root) else str(f)
                found.append(DocCommand(rel, start + 1, text, parsed[1], parsed[0]))
    return found


def inline_commands(files: list[Path] | None = None, root: Path = ROOT) -> list[DocCommand]:
    """Every ``dpemb WORD ...`` code span of the prose outside fenced blocks (``launcher``
    is ``inline``). Spans naming a module (``dpemb.cli``) are not commands."""
    found: list[DocCommand] = []
    for f in files if files is not None else doc_files(root):
        fence = None
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
            stripped = line.strip()
            m = re.match(r"(`{3,}|~{3,})", stripped)
            if m and (fence is None or stripped.startswith(fence)):
                fence = m.group(1) if fence is None else None
                continue
            if fence is not None:
                continue
            for span in re.findall(r"(?<!`)`([^`]+)`(?!`)", line):
                if not re.match(r"dpemb [a-z]", span):
                    continue
                parsed = command_argv(span.strip())
                if parsed is not None:
                    rel = f.relative_to(root).as_posix() if f.is_relative_to(root) else str(f)
                    found.append(DocCommand(rel, n, span.strip(), parsed[1], "inline"))
    return found


# ------------------------------------------------------------------------------ parsing
class ParseProblem(Exception):
    """argparse's complaint about a documented command."""


@contextmanager
def raising_parser() -> Iterator[None]:
    """argparse errors (and --help's exit) raise ParseProblem instead of exiting."""

    def error(self: argparse.ArgumentParser, message: str) -> None:
        raise ParseProblem(f"{self.prog}: error: {message}")

    def exit(self: argparse.ArgumentParser, status: int = 0, message: str | None = None) -> None:
        raise ParseProblem(f"{self.prog}: exit {status}: {message or ''}".strip())

    with mock.patch.object(argparse.ArgumentParser, "error", error), \
            mock.patch.object(argparse.ArgumentParser, "exit", exit):
        yield


def build_parser() -> argparse.ArgumentParser:
    """dpemb's own parser (the one `dpemb.cli.main.main` parses with)."""
    from dpemb.cli.main import build_parser as dpemb_parser

    return dpemb_parser()


def subparsers_of(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subcommands of ``p`` by name (empty when it has none)."""
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def subparser_for(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[argparse.ArgumentParser, int]:
    """The innermost (sub)parser that ``argv`` names, and how many words name it."""
    p, n = parser, 0
    while n < len(argv):
        choices = subparsers_of(p)
        if not choices or argv[n] not in choices:
            break
        p, n = choices[argv[n]], n + 1
    return p, n


PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")  # N, DIR, RUN, F, GAMMA: a value to fill in
#: values tried, in order, for a placeholder given to a typed flag
TYPED_VALUES = ("1", "0.5", "1-2")


def unbracket(text: str) -> str:
    """A synopsis as a command: ``[--out NEW]`` -> ``--out NEW``; a bracket holding no flag
    (``[split flags as above]``) is dropped; ``{a,b}`` and ``a|b`` take the first choice."""
    previous = None
    while previous != text:
        previous = text
        text = re.sub(r"\[([^\[\]]*)\]", lambda m: m.group(1) if m.group(1).lstrip().startswith("-") else "", text)
    text = re.sub(r"\{([^{},]*),[^{}]*\}", r"\1", text)
    return " ".join(w.split("|", 1)[0] if "|" in w and not w.startswith("|") else w for w in text.split())


def _fill(p: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """``words`` with ``...`` replaced by the required flags it leaves out, and placeholders
    given to typed flags replaced by values of their type."""
    out: list[str] = []
    for w in words:
        if w in ("...", "…"):
            for action in p._actions:
                if action.required and action.option_strings and not set(action.option_strings) & set(words):
                    value = _typed_value(action) if action.type or action.choices else None
                    out += [action.option_strings[-1], value or action.metavar or action.dest.upper()]
            continue
        prev = p._option_string_actions.get(out[-1]) if out else None
        if prev is not None and prev.nargs != 0 and PLACEHOLDER.fullmatch(w) and (prev.type or prev.choices):
            w = _typed_value(prev) or w
        out.append(w)
    return out


def _typed_value(action: argparse.Action) -> str | None:
    if action.choices:
        return str(next(iter(action.choices)))
    for value in TYPED_VALUES:
        try:
            action.type(value)  # type: ignore[misc]
            return value
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            continue
    return None


def parse_argv(cmd: DocCommand, parser: argparse.ArgumentParser | None = None) -> list[str]:
    """The argv that `parse_problem` parses for ``cmd``: brackets and placeholders filled."""
    parser = parser or build_parser()
    words = _split(unbracket(" ".join(cmd.argv)))
    p, n = subparser_for(parser, words)
    return words[:n] + _fill(p, words[n:])


def parse_problem(cmd: DocCommand, parser: argparse.ArgumentParser | None = None) -> str | None:
    """argparse's error for ``cmd`` with dpemb's real parser, or None if it parses."""
    parser = parser or build_parser()
    argv = parse_argv(cmd, parser)
    with raising_parser():
        try:
            parser.parse_args(argv)
        except ParseProblem as e:
            return f"{e} (parsed: dpemb {shlex.join(argv)})"
    return None


def fragment_problem(cmd: DocCommand, parser: argparse.ArgumentParser | None = None) -> str | None:
    """For a prose fragment such as ``dpemb train --eval-split validation|test``: the
    subcommand must exist, every ``--flag`` must exist where it is named, and a value
    (each ``|`` alternative) given to a flag with choices must be one of them. Missing
    arguments are fine. None if all holds."""
    parser = parser or build_parser()
    words = list(cmd.argv)
    p, n = subparser_for(parser, words)
    if n == 0 or (subparsers_of(p) and n < len(words) and not words[n].startswith("-")
                  and words[n] not in ("...", "…")):
        bad = words[n] if n < len(words) else ""
        return f"{p.prog}: no subcommand {bad!r} (choices: {', '.join(subparsers_of(p))})"
    rest = re.sub(r"[\[\]{}]", " ", " ".join(words[n:])).split()
    for i, w in enumerate(rest):
        if not w.startswith("--"):
            continue
        flag = w.split("=", 1)[0].rstrip(".,;:'\"")
        action = p._option_string_actions.get(flag)
        if action is None:
            return f"{p.prog}: no flag {flag}"
        value = w.split("=", 1)[1] if "=" in w else (rest[i + 1] if i + 1 < len(rest) else None)
        if action.choices and value is not None and not value.startswith("-") and not PLACEHOLDER.fullmatch(value):
            for alt in value.rstrip(".,;:'\"").split("," if "," in value and "|" not in value else "|"):
                if alt and str(alt) not in {str(c) for c in action.choices}:
                    return f"{p.prog}: {flag} {alt!r} is not one of {sorted(map(str, action.choices))}"
    return None
