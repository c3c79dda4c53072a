"""The README and docs/ stay true to the tree and to the command line.

- every relative link in README.md and docs/*.md points at a file that exists (and an #anchor at
  a heading of that file);
- every `pipedit <command> [<subcommand>] ... --flag` written in them (fenced code blocks and
  inline code; `pipedit` or `.venv/bin/pipedit`; lines continued with a trailing backslash) names
  a command that exists and a flag that command's argparse parser accepts;
- README.md links to every page of docs/.

Fast: reads Markdown and builds the parser; nothing runs, no network, no Ray.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pipedit.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOC_FILES = [README, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"`([^`]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# `pipedit` as a command: at the start of a segment, after whitespace or a path (.venv/bin/),
# followed by a word on the same line; not `pipedit.serve`, `src/pipedit/`, `pipedit:`.
COMMAND = re.compile(r"(?:(?<=^)|(?<=[\s/]))pipedit(?=[ \t]+\S)")
WORD = re.compile(r"[a-z][a-z0-9_-]*")
FLAG = re.compile(r"--[A-Za-z0-9][\w-]*")
SHELL_ENDS = {"|", "||", "&&", ";", ">", ">>", "2>&1"}


# --- Markdown -------------------------------------------------------------------------------

@dataclass
class Markdown:
    """A Markdown text split into prose (fenced blocks blanked, line numbers kept) and the
    logical lines of its fenced code blocks (backslash continuations joined)."""

    prose: str
    code_lines: list[tuple[int, str]] = field(default_factory=list)


def split_markdown(text: str) -> Markdown:
    prose, code, pending, pending_line = [], [], "", 0
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = FENCE.match(line)
        if fence is None:
            if opened:
                fence = opened.group(1)
                prose.append("")
            else:
                prose.append(line)
            continue
        prose.append("")
        if opened and line.strip().startswith(fence):
            fence = None
            if pending:
                code.append((pending_line, pending))
                pending = ""
            continue
        if not pending:
            pending_line = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            code.append((pending_line, pending + line))
            pending = ""
    return Markdown("\n".join(prose), code)


def inline_code(prose: str) -> list[tuple[int, str]]:
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1).replace("\n", " "))
            for m in INLINE_CODE.finditer(prose)]


def code_segments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every code block line and inline code span of a Markdown text."""
    markdown = split_markdown(text)
    return sorted(markdown.code_lines + inline_code(markdown.prose))


# --- links ------------------------------------------------------------------------------------

def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in split_markdown(path.read_text()).prose.splitlines():
        heading = HEADING.match(line)
        if not heading:
            continue
        slug = github_slug(heading.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def link_problems(path: Path, root: Path = ROOT) -> list[str]:
    prose = INLINE_CODE.sub("code", split_markdown(path.read_text()).prose)
    targets = [(prose.count("\n", 0, m.start()) + 1, m.group(1))
               for pattern in (LINK, REFERENCE_LINK) for m in pattern.finditer(prose)]
    problems = []
    for line, target in targets:
        if re.match(r"(?i)(https?|mailto|ftp):", target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{line}: link {target!r}"
        if not resolved.exists():
            problems.append(f"{where}: {file_part} does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{where}: no heading with the anchor #{anchor} in {resolved.name}")
    return problems


# --- commands and flags ---------------------------------------------------------------------

def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def all_flags(parser: argparse.ArgumentParser) -> set[str]:
    flags = set(option_strings(parser))
    for child in subcommands(parser).values():
        flags |= all_flags(child)
    return flags


@dataclass
class CommandCheck:
    problems: list[str] = field(default_factory=list)
    flags_checked: int = 0
    commands: set[str] = field(default_factory=set)


def command_tokens(rest: str) -> list[str]:
    """The words of one command, up to where the shell line goes on to something else (a pipe,
    `&&`, `;`, a redirect or a comment outside [...] placeholders)."""
    tokens, depth = [], 0
    for token in rest.split():
        if depth == 0 and (token in SHELL_ENDS or token.startswith("#")):
            break
        depth = max(0, depth + token.count("[") - token.count("]"))
        tokens.append(token)
    return tokens


def check_segment(segment: str, parser: argparse.ArgumentParser, where: str = "",
                  result: CommandCheck | None = None) -> CommandCheck:
    """Checks every `pipedit ...` command in one line of code (or one inline code span)."""
    result = result if result is not None else CommandCheck()
    for match in COMMAND.finditer(segment):
        rest = segment[match.end():]
        following = COMMAND.search(rest)
        tokens = command_tokens(rest[: following.start()] if following else rest)
        current, path, index = parser, ["pipedit"], 0
        while index < len(tokens):
            choices = subcommands(current)
            if not choices or not WORD.fullmatch(tokens[index]):
                break
            if tokens[index] not in choices:
                known = ", ".join(sorted(choices))
                result.problems.append(f"{where}`{' '.join(path)} {tokens[index]}`: no such command "
                                       f"(known: {known})")
                current = None
                break
            current = choices[tokens[index]]
            path.append(tokens[index])
            index += 1
        if current is None:
            continue
        if index == 0 and tokens and not tokens[0].startswith(("-", "[")):
            continue  # `pipedit` followed by something that is no command word (prose in code)
        name = " ".join(path)
        result.commands.add(name)
        accepted = option_strings(current)
        for token in tokens[index:]:
            for piece in re.split(r"[|\[\]=,()]", token):
                flag = FLAG.match(piece)
                if not flag:
                    continue
                result.flags_checked += 1
                if flag.group() not in accepted:
                    result.problems.append(f"{where}`{name}` has no flag {flag.group()} "
                                           f"(it takes: {', '.join(sorted(accepted))})")
    return result


def check_markdown(text: str, parser: argparse.ArgumentParser, name: str = "<text>",
                   result: CommandCheck | None = None) -> CommandCheck:
    result = result if result is not None else CommandCheck()
    for line, segment in code_segments(text):
        check_segment(segment, parser, f"{name}:{line}: ", result)
    return result


# --- tests ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


@pytest.fixture(scope="module")
def docs_check(parser) -> CommandCheck:
    result = CommandCheck()
    for path in DOC_FILES:
        check_markdown(path.read_text(), parser, str(path.relative_to(ROOT)), result)
    return result


def test_docs_exist_and_readme_is_short():
    assert len(DOC_FILES) > 1, "docs/*.md is empty"
    lines = len(README.read_text().splitlines())
    assert lines < 150, f"README.md has {lines} lines: move the details into docs/"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert link_problems(path) == []


def test_readme_links_every_docs_page():
    linked = {(README.parent / m.group(1).partition("#")[0]).resolve()
              for m in LINK.finditer(split_markdown(README.read_text()).prose)}
    missing = [str(p.relative_to(ROOT)) for p in DOC_FILES[1:] if p.resolve() not in linked]
    assert missing == [], f"README.md does not link to {missing}"


def test_documented_commands_and_flags_exist(docs_check):
    assert docs_check.problems == []


def test_the_docs_check_enough_flags(docs_check):
    # A checker that matches nothing would pass the test above; it must have seen real commands.
    assert docs_check.flags_checked >= 20, docs_check.flags_checked
    for command in ("generate", "serve", "render", "bench", "plan", "check-node", "env", "demo-checkpoint"):
        assert any(seen.split()[1:2] == [command] for seen in docs_check.commands), f"pipedit {command} is undocumented"


def test_inline_flags_exist_somewhere(parser):
    """A code span that is only a flag (`--vae-tiling on`) names a flag of some pipedit command."""
    known = all_flags(parser)
    problems = []
    for path in DOC_FILES:
        for line, span in inline_code(split_markdown(path.read_text()).prose):
            flag = FLAG.match(span)
            if flag and flag.group() not in known:
                problems.append(f"{path.relative_to(ROOT)}:{line}: {flag.group()} is no pipedit flag")
    assert problems == []


# --- the checker checks -----------------------------------------------------------------------

def test_checker_reports_a_made_up_flag(parser):
    result = check_segment("pipedit generate --no-such-flag", parser)
    assert len(result.problems) == 1 and "--no-such-flag" in result.problems[0]
    assert result.flags_checked == 1


@pytest.mark.parametrize("text", [
    "`pipedit generate --prompt x --no-such-flag`",
    "`.venv/bin/pipedit generate --prompt x --no-such-flag`",
    "```bash\n.venv/bin/pipedit generate --prompt x \\\n    [--seed 1] [--no-such-flag]\n```",
    "```\n$ pipedit bench sp --ulysses 2 --no-such-flag | tail -2\n```",
    "text `pipedit generate\n--no-such-flag` more text",
])
def test_checker_finds_flags_in_code_blocks_and_inline_code(parser, text):
    result = check_markdown(text, parser)
    assert [p for p in result.problems if "--no-such-flag" in p], result


def test_checker_knows_subcommands(parser):
    assert check_segment("pipedit bench latency --resolutions 128x128 --base-offload", parser).problems == []
    wrong = check_segment("pipedit bench latency --chunks 1,2", parser).problems  # a flag of bench sp
    assert len(wrong) == 1 and "--chunks" in wrong[0]
    assert "no such command" in check_segment("pipedit frobnicate --seed 1", parser).problems[0]
    assert "no such command" in check_segment("pipedit bench nope", parser).problems[0]


@pytest.mark.parametrize("text", [
    "pipedit plan --model hunyuan-video|opensora-plan --gpus 8 --gpu a6000|l40|h100|h200|this "
    "[--interconnect nvlink|pcie]",
    "pipedit generate --prompt x --output y [--aco auto|on|off] [--vae-tiling=auto]",
    "pipedit generate [--seed | --fps] [--height --width --num-frames]",
    "pipedit render p.jsonl --out-dir r/ [--endpoint URL [--api-key KEY] [--max-in-flight 4]]",
    "pipedit plan --validate-paper | tail --lines 2",   # --lines belongs to tail
    "pipedit env --json  # --not-a-flag in a comment",
    "pipedit bench",
    "pipedit.serve.deployment:app_builder --whatever",  # a module path, not the command
])
def test_checker_accepts_placeholders(parser, text):
    result = check_segment(text, parser)
    assert result.problems == []


def test_placeholder_flags_are_all_checked(parser):
    result = check_segment("pipedit generate [--seed | --fps] [--aco auto|on|off,--ranks=2]", parser)
    assert result.flags_checked == 4 and result.problems == []
    assert len(check_segment("pipedit generate [--seed | --nope]", parser).problems) == 1


def test_link_check_reports_a_missing_file(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [web](https://example.com) [gone](missing.md) [bad](#nowhere)\n"
                    "`[not a link](in-code.md)`\n```\n[nor](this.md)\n```\n")
    problems = link_problems(page, root=tmp_path)
    assert len(problems) == 2, problems
    assert "missing.md" in problems[0] and "#nowhere" in problems[1]


def test_github_slugs():
    assert github_slug("OpenSoraPlan v1.3") == "opensoraplan-v13"
    assert (github_slug("`pipedit check-node`: validate the parallel paths")
            == "pipedit-check-node-validate-the-parallel-paths")
    assert github_slug("bench latency: the paper's protocol") == "bench-latency-the-papers-protocol"


def test_getting_the_weights_lists_every_familys_released_sizes():
    """docs/models.md's disk table holds each family entry's hub.sizes: the repo and its GB."""
    from pipedit import families

    text = (ROOT / "docs" / "models.md").read_text()
    for entry in families.families():
        for repo, gigabytes in entry.hub.sizes if entry.hub else ():
            assert re.search(rf"`{re.escape(repo)}`[^|\n]*\| {gigabytes:g} \|", text), (entry.name, repo)
