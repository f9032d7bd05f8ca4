"""examples/: what can be checked without a model, a service manager or a container.

The service files parse and run the daemon on a data directory; every ``treemail ...``
command line in examples/README.md (and in the files' own instructions) parses with the
real command line; every TOML block decodes with the daemon's config reader, and every
``[table] key`` the prose names is a key of that table.
"""

from __future__ import annotations

import argparse
import configparser
import json
import plistlib
import re
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from treemail.adapters.daemon.settings import decode, known_keys
from treemail.adapters.ui.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GUIDE = EXAMPLES / "README.md"
UNIT = EXAMPLES / "systemd" / "treemail.service"
PLIST = EXAMPLES / "launchd" / "dev.treemail.daemon.plist"
DOCKERFILE = EXAMPLES / "docker" / "Dockerfile"


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)


def _commands(words: list[str]) -> Iterator[list[str]]:
    """Each ``treemail COMMAND ...`` in a shell line's words, up to the next operator
    (``docker exec NAME treemail run ...`` included)."""
    names = set(_subcommands())
    for index, word in enumerate(words[:-1]):
        if Path(word).name == "treemail" and words[index + 1] in names:
            rest = words[index + 1:]
            ends = [at for at, w in enumerate(rest) if w in {"|", "||", "&&", ";", "&", "<", ">"}]
            yield rest[:ends[0]] if ends else rest


def _shell_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def _subcommands() -> list[str]:
    action = next(a for a in build_parser()._actions
                  if isinstance(a, argparse._SubParsersAction))
    return list(action.choices)


def _parse(argv: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse's way of refusing
        raise AssertionError(f"`treemail {shlex.join(argv)}` does not parse") from exc


def _commented_commands(path: Path) -> list[list[str]]:
    """The commands a file's comment shows, indented (``#   docker exec ...``)."""
    return [argv for line in path.read_text().splitlines() if line.startswith("#   ")
            for argv in _commands(_shell_words(line[1:].rstrip("\\ ")))]


def _guide_commands() -> list[list[str]]:
    found: list[list[str]] = []
    for block in _blocks(GUIDE.read_text(), "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            found += _commands(_shell_words(line.split(" # ")[0]))
    return found


def test_every_treemail_line_of_the_guide_parses() -> None:
    commands = _guide_commands()
    for argv in commands:
        _parse(argv)
    # the walk-through the guide promises: not vacuous if a block's fence changes
    assert {"init", "doctor", "daemon", "run", "cancel"} <= {argv[0] for argv in commands}


def test_a_broken_line_is_caught() -> None:
    """The check above can fail: a made-up option is refused."""
    with pytest.raises(AssertionError, match="does not parse"):
        _parse(["run", "lead", "task", "--no-such-option"])
    assert list(_commands(_shell_words("docker exec -it treemail treemail cancel x && ls"))) \
        == [["cancel", "x"]]


def _servers_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("## Known-good OpenAI-compatible servers\n", 1)[1].split("\n## ", 1)[0]


def test_every_toml_block_of_the_guide_and_the_servers_list_decodes() -> None:
    blocks = _blocks(GUIDE.read_text(), "toml") + _blocks(_servers_section(), "toml")
    assert len(blocks) == 3
    for block in blocks:
        decode(tomllib.loads(block), "examples/README.md")  # raises config:unknown_key


def test_the_servers_list_says_what_was_tested() -> None:
    """Each server with its base_url, and only the fake server claimed as run by a test."""
    section = " ".join(_servers_section().split())
    for server, url in [("OpenAI", "https://api.openai.com/v1"),
                        ("vLLM", "http://localhost:8000/v1"),
                        ("llama.cpp", "http://localhost:8080/v1"),
                        ("Ollama", "http://localhost:11434/v1"),
                        ("LM Studio", "http://localhost:1234/v1")]:
        assert re.search(rf"\| {re.escape(server)} \|[^\n]*`{re.escape(url)}`",
                         _servers_section()), server
    assert "none of these five servers runs in the test suite" in section
    assert (ROOT / "tests" / "fuzz" / "fake_server.py").is_file()
    assert "`tests/fuzz/fake_server.py`" in section


def _named_keys(text: str) -> list[tuple[str, str]]:
    """``[runs] max_tool_calls`` (in one span) and ``[daemon.openai]`` ``base_url``, ``model``
    (a span each) mentions: the table and each key."""
    inline = re.findall(r"`\[([a-z.]+)\] ([a-z_]+)", text)
    spans = r"`\[([a-z.]+)\]` \(?(`[a-z_]+`(?:,? (?:and )?`[a-z_]+`)*)"
    listed = [(table, key) for table, keys in re.findall(spans, text)
              for key in re.findall(r"`([a-z_]+)`", keys)]
    return inline + listed


def test_every_table_key_the_docs_name_exists() -> None:
    """In the guide and the main README."""
    named = [pair for path in (GUIDE, ROOT / "README.md") for pair in _named_keys(path.read_text())]
    assert {("daemon.openai", "api_key_env"), ("runs", "max_model_requests")} <= set(named)
    for table, key in named:
        assert key in known_keys(table), f"[{table}] {key} is not a config key"
    assert _named_keys("`[daemon.openai]` `base_url`, `modle`") == [
        ("daemon.openai", "base_url"), ("daemon.openai", "modle")]  # a typo would be seen


def test_the_systemd_unit_runs_the_daemon_and_restarts_it_on_failure() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(UNIT.read_text())
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    assert service["EnvironmentFile"].startswith("%h/")
    program, *argv = shlex.split(service["ExecStart"])
    assert program.startswith("%h/") and Path(program).name == "treemail"  # absolute
    args = _parse(argv)
    assert (args.command, str(args.data_dir)) == ("daemon", "%h/.local/share/treemail")
    assert unit["Install"]["WantedBy"] == "default.target"  # a user unit's target
    for argv in _commented_commands(UNIT):
        _parse(argv)


def test_the_launchd_plist_runs_the_daemon_with_the_key_from_the_env_file() -> None:
    agent = plistlib.loads(PLIST.read_bytes())
    assert agent["Label"] == PLIST.stem
    shell, flag, script = agent["ProgramArguments"]
    assert (shell, flag) == ("/bin/sh", "-c")
    assert '. "$HOME/.config/treemail/env"' in script
    commands = list(_commands(_shell_words(script)))
    assert len(commands) == 1
    args = _parse(commands[0])
    assert args.command == "daemon"
    assert agent["KeepAlive"] == {"SuccessfulExit": False}  # restart on failure only
    assert "OPENAI_API_KEY" not in PLIST.read_text()  # the key stays out of the plist


def test_the_dockerfile_runs_the_daemon_as_a_user_on_a_volume() -> None:
    lines = [line for line in DOCKERFILE.read_text().replace("\\\n", " ").splitlines()
             if line and not line.startswith("#")]
    instructions = [tuple(line.split(maxsplit=1)) for line in lines]
    assert instructions[0] == ("FROM", "python:3.11-slim")
    user = [value for word, value in instructions if word == "USER"]
    assert user and user[-1] not in {"root", "0"}
    (volume,) = [json.loads(value) for word, value in instructions if word == "VOLUME"]
    (cmd,) = [json.loads(value) for word, value in instructions if word == "CMD"]
    assert cmd[0] == "treemail"
    args = _parse(cmd[1:])
    assert args.command == "daemon" and [str(args.data_dir)] == volume
    assert args.tcp is None  # its TCP is loopback only: nothing to publish
    (run,) = [argv for argv in _commented_commands(DOCKERFILE) if argv[0] == "run"]
    _parse(run)
