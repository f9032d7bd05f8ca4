"""The README's daemon section stays true: every command and flag it names exists, every
code and file it names is the code's, and its config and directives are the ones read.
(The three-terminal recipe itself runs in tests/daemon/test_recipe.py.)"""

from __future__ import annotations

import inspect
import re
import shlex
from pathlib import Path

import pytest

from treemail.adapters.daemon import host, lock, tcp
from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.daemon.scripted import Plan
from treemail.adapters.store.lmdb_files import OWNER_FILE
from treemail.adapters.ui.cli import main
from treemail.protocol.methods import AUTH_CHALLENGE, AUTH_PROVE, METHODS
from treemail.spec_tables import errors_table

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## The daemon\n", 1)[1].split("\n## ", 1)[0]


def spans(text: str) -> list[str]:
    """Inline code spans, and each command line of its code blocks (comments dropped)."""
    blocks = re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)
    lines = [line.split("#", 1)[0].strip() for b in blocks for line in b.splitlines()]
    inline = re.findall(r"(?<!`)`([^`\n]+)`(?!`)", re.sub(r"```.*?```", "", text,
                                                        flags=re.DOTALL))
    return [s for s in [*lines, *inline] if s]


def commands(text: str) -> list[list[str]]:
    """Every ``treemail SUB ...`` the text names, as the words after ``treemail``."""
    found = []
    for span in spans(text):
        words = shlex.split(span)
        for i, word in enumerate(words):
            if word.endswith("treemail") and i + 1 < len(words):
                found.append(words[i + 1:])
    return found


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0, f"treemail {' '.join(argv)} is not a command"
    return out


def test_every_command_and_flag_the_section_names_exists(
    capsys: pytest.CaptureFixture[str],
) -> None:
    named = commands(section())
    assert {words[0] for words in named} >= {
        "daemon", "tail", "demo", "sessions", "status", "steer", "send", "replay", "approve",
        "verify"}
    for words in named:
        shown = _help(capsys, words[0])
        for flag in (w.split("=", 1)[0] for w in words[1:] if w.startswith("--")):
            assert re.search(rf"{re.escape(flag)}\b", shown), f"treemail {words[0]} {flag}"


def test_a_flag_named_alone_belongs_to_a_daemon_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    alone = {s.split()[0] for s in spans(section()) if s.startswith("--")}
    assert alone >= {"--data-dir", "--stdio", "--tcp", "--token-file"}
    helps = " ".join(_help(capsys, c) for c in ("daemon", "sessions", "demo"))
    for flag in alone:
        assert re.search(rf"{re.escape(flag)}\b", helps), flag


def test_the_codes_files_and_names_it_mentions_are_the_codes() -> None:
    text = section()
    registered = {row["code"] for row in errors_table()["errors"]}
    codes = {s for s in spans(text) if re.fullmatch(r"[a-z_]+:[a-z][a-z0-9_]*", s)}
    assert codes and codes <= registered, codes - registered
    assert f"DATA_DIR/{tcp.TOKEN_FILE}" in text and f"store/{OWNER_FILE}" in text
    assert host.DEFAULT_DATA_DIR.removeprefix("./") in text
    assert (ROOT / "spec" / "bindings").is_dir()
    assert re.search(r"^check-bindings:", (ROOT / "justfile").read_text(), re.MULTILINE)
    assert "token" in inspect.signature(DaemonClient.connect).parameters
    assert "`auth.challenge`, then `auth.prove`" in text
    assert {AUTH_CHALLENGE.name, AUTH_PROVE.name} <= set(METHODS)
    assert f"{tcp.AUTH_TIMEOUT:g} seconds, {tcp.AUTH_BYTES // 1024} KiB and one of " \
        f"{tcp.MAX_UNAUTHENTICATED} places" in text
    assert lock.DAEMON_ROLE == "treemail daemon"


def test_the_config_and_directives_it_describes_are_the_ones_read(tmp_path: Path) -> None:
    text = section()
    assert 'model = "openai"' in text
    (tmp_path / "config.toml").write_text(
        '[daemon]\nmodel = "openai"\n[daemon.openai]\nbase_url = "http://127.0.0.1:9"\n'
        'model = "m"\napi_key_env = "NO_SUCH_KEY"\n')
    settings = host.Settings.load(tmp_path)
    assert type(settings.model_for("a", None)).__name__ == "OpenAICompatibleModel"
    for key in ("base_url", "model", "api_key_env"):
        assert f"`{key}`" in text
    assert host.Settings().model == "scripted"  # "with no config.toml ... the scripted one"
    assert Plan.of("delegate AGENT: TASK\nsteer AGENT: TEXT") == Plan(
        (("AGENT", "TASK"),), (("AGENT", "TEXT"),))
    assert "`delegate AGENT: TASK`" in text and "`steer AGENT: TEXT`" in text
