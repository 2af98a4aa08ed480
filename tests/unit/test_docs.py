"""We test that the documentation says what the code does: the configuration reference
(docs/configuration.md) documents every daemon setting with its real default and nothing
that does not exist; the CLI reference (docs/cli.md) documents every command and every
flag of ``netctl`` (``bench`` included, from the kit's entry point) and nothing else; every
``netctl …`` command line written anywhere in README.md and docs/ uses flags its command
has; and every relative link between README.md and docs/*.md resolves, to a file that
exists and, with ``#anchor``, to a heading of it (GitHub's slugs)."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from netctl.commands.cli import build_parser
from netctl.settings import DaemonConfig, load_config

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^```.*?^```[^\n]*$", re.M | re.S)


def prose(text: str) -> str:
    """The text without its fenced code blocks (each replaced by an empty line)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: its text, lower case, without punctuation other than
    ``-`` and ``_``, spaces as ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} (.+)$", prose(text), re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def sections(text: str, level: int) -> dict[str, str]:
    """Each heading of that level (outside code) with the text up to the next one of that
    level or above."""
    parts = re.split(rf"^(#{{1,{level}}} .+)$", prose(text), flags=re.M)
    out: dict[str, str] = {}
    for head, body in zip(parts[1::2], parts[2::2], strict=True):
        if head.startswith("#" * level + " "):
            out[head[level + 1:].strip()] = body
    return out


def first_cells(body: str) -> list[str]:
    """The first cell of every row of the tables in ``body`` (header and rule rows left
    out)."""
    cells = []
    for line in body.splitlines():
        if not line.startswith("|") or re.match(r"^\|\s*-", line):
            continue
        cell = re.split(r"(?<!\\)\|", line)[1].strip()
        if cell.startswith("`"):
            cells.append(cell)
    return cells


# ---------------------------------------------------------------- configuration

def documented_settings() -> dict[str, str]:
    """Every setting of the daemon's section of docs/configuration.md, with its default
    as written."""
    text = (DOCS / "configuration.md").read_text()
    body = sections(text, 2)["The daemon"]
    out = {}
    for line in body.splitlines():
        m = re.match(r"^\| `([a-z-]+)`(?: \(config only\))? \| ([^|]*) \|", line)
        if m:
            assert m.group(1) not in out, f"{m.group(1)} documented twice"
            out[m.group(1)] = m.group(2).strip()
    return out


def test_configuration_documents_every_setting_and_nothing_else() -> None:
    code = {f.name.replace("_", "-") for f in dataclasses.fields(DaemonConfig)}
    docs = set(documented_settings())
    assert code - docs == set(), "settings of DaemonConfig not in docs/configuration.md"
    assert docs - code == set(), "docs/configuration.md documents settings that do not exist"


def test_every_documented_setting_is_a_key_load_config_takes(tmp_path: Path) -> None:
    """Each key, written in a ``--config`` file as the reference spells it, is accepted
    (an unknown key is refused: checked too, so the check can fail)."""
    for key in documented_settings():
        f = tmp_path / "daemon.yaml"
        value: Any = getattr(DaemonConfig(), key.replace("-", "_"))
        if isinstance(value, tuple):
            value = list(value)
        f.write_bytes(msgspec.yaml.encode({key: value}))
        load_config(str(f), {})
    f.write_text("no-such-setting: 1\n")
    with pytest.raises(Exception, match="unknown key"):
        load_config(str(f), {})


def test_documented_defaults_are_the_code_s() -> None:
    """A default written as a value (``60``, ``/var/lib/netctl``, ``[0]``, ``7d``,
    ``0.9``) is what the daemon gets without that setting; ``none``/``off`` are an unset
    value, ``$NODE_NAME`` the environment the flag reads."""
    default = DaemonConfig()
    checked = 0
    for key, cell in documented_settings().items():
        want = getattr(default, key.replace("-", "_"))
        written = re.sub(r"\s*\(.*\)$", "", cell).strip().strip("`")
        if written in ("none", "off"):
            assert want in (None, "", False), f"{key}: documented {written}, code {want!r}"
            continue
        if written.startswith("$"):
            assert want is None, key
            continue
        value = msgspec.yaml.decode(written.encode())
        got = getattr(load_config(None, {key.replace("-", "_"): value}), key.replace("-", "_"))
        assert got == want, f"{key}: documented default {written}, code {want!r}"
        checked += 1
    assert checked > 30


# ---------------------------------------------------------------- CLI

def parser_commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command of ``netctl`` by its path (``("ipam", "show")``), walking the
    sub-parsers."""
    out: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        if path:
            out[path] = p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for name, sub in a.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return out


def options(p: argparse.ArgumentParser) -> set[str]:
    """A command's flags (its own, not its sub-commands'), ``--help`` and hidden ones
    left out; positionals by their metavar."""
    out = set()
    for a in p._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if a.help == argparse.SUPPRESS:
            continue
        out |= set(a.option_strings) if a.option_strings else {a.metavar or a.dest}
    return out


def documented_commands() -> dict[tuple[str, ...], set[str]]:
    text = (DOCS / "cli.md").read_text()
    out = {}
    for head, body in sections(text, 2).items():
        assert head.startswith("netctl "), f"docs/cli.md: a section that is no command: {head}"
        flags: set[str] = set()
        for cell in first_cells(body):
            code = cell.strip("`").replace("\\|", "|")
            if code.startswith("-"):
                flags |= set(re.findall(r"--?[a-z][a-z0-9-]*", code))
            else:
                flags.add(code)
        out[tuple(head.split()[1:])] = flags
    return out


def test_cli_reference_documents_every_command_and_flag_and_nothing_else() -> None:
    commands = parser_commands()
    assert ("bench", "churn") in commands, "the kit's bench commands are not installed"
    docs = documented_commands()
    assert set(commands) - set(docs) == set(), "commands not in docs/cli.md"
    assert set(docs) - set(commands) == set(), "docs/cli.md documents commands that do not exist"
    for path, p in commands.items():
        assert docs[path] == options(p), f"netctl {' '.join(path)}: docs/cli.md's flags differ"


def command_lines() -> list[tuple[str, str]]:
    """Every ``netctl …`` command line in README.md and docs/ (fenced, continued on
    indented lines, or in inline code), with its page."""
    out = []
    for page in PAGES:
        text = page.read_text()
        for block in FENCE.findall(text):
            lines = block.splitlines()[1:-1]
            for i, line in enumerate(lines):
                m = re.search(r"(?:^|[\s/$(])netctl (.*)$", line)
                if not m or line.lstrip().startswith("#"):
                    continue
                cmd = m.group(1)
                for more in lines[i + 1:]:
                    if not re.match(r"^\s{4,}\[", more):
                        break
                    cmd += " " + more.strip()
                out.append((page.name, cmd))
        for m in re.finditer(r"`(?:[^`]*[\s/])?netctl ([^`]*)`", prose(text)):
            out.append((page.name, m.group(1)))
    return out


def test_every_command_line_in_the_docs_uses_flags_its_command_has() -> None:
    commands = parser_commands()
    lines = command_lines()
    assert len(lines) > 100
    for page, line in lines:
        words = line.split()
        path: tuple[str, ...] = ()
        for w in words:
            if (*path, w) in commands:
                path = (*path, w)
            else:
                break
        if not path:  # prose such as "netctl daemon's …" or "netctl is …"
            continue
        if " | " in line:  # a synopsis of sub-commands: `netctl ipam pools | show … | leaks …`
            path = path[:1]
        allowed = set()
        for other, p in commands.items():
            if other[:len(path)] == path:  # the command and its sub-commands
                allowed |= options(p)
        allowed |= {"--help", "--python"}
        for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", line):
            assert flag in allowed, \
                f"{page}: `netctl {line}`: netctl {' '.join(path)} has no {flag}"


# ---------------------------------------------------------------- links

def links(text: str) -> list[str]:
    body = re.sub(r"`[^`\n]*`", "", prose(text))
    return re.findall(r"\]\(([^)\s]+)\)", body)


def test_links_between_the_pages_resolve() -> None:
    checked = 0
    for page in PAGES:
        for href in links(page.read_text()):
            if re.match(r"^[a-z]+:", href):
                continue
            target, _, anchor = href.partition("#")
            dest = (page.parent / target).resolve() if target else page
            assert dest.exists(), f"{page.name}: link to {href}: no such file"
            if anchor:
                assert dest.suffix == ".md", f"{page.name}: {href}: an anchor into a non-page"
                assert anchor in anchors(dest.read_text()), \
                    f"{page.name}: link to {href}: no heading with that anchor in {dest.name}"
            checked += 1
    assert checked > 50


def test_every_page_is_linked_from_the_front_page() -> None:
    hrefs = links((REPO / "README.md").read_text())
    front = {(REPO / h.partition("#")[0]).resolve() for h in hrefs}
    for page in DOCS.glob("*.md"):
        assert page.resolve() in front, f"README.md links nowhere to {page.name}"


def test_slugs_as_github_makes_them() -> None:
    assert slug("Cluster-wide IPAM (`ipam-backend: kubernetes`)") == \
        "cluster-wide-ipam-ipam-backend-kubernetes"
    assert slug("Is it up, and can it serve?") == "is-it-up-and-can-it-serve"
    assert slug("Measured: the static plugin (2026-11-26, load average 3\u20137)") == \
        "measured-the-static-plugin-2026-11-26-load-average-37"
    assert anchors("# A\n## B\n```\n# not a heading\n```\n## B\n") == {"a", "b", "b-1"}


def test_the_readme_stays_a_front_page() -> None:
    """What netctl is, the commands (``make test`` is the one CI runs), and links: the rest
    lives in docs/."""
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert re.search(r"^make test\b", text, re.M)
    assert re.search(r"^make demo\b", text, re.M)
