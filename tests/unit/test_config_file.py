"""``DATA_DIR/config.toml`` is decoded whole and strictly; spec/config.md documents every key
it may hold; ``treemail init`` writes one that parses, and two agents, privately."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from treemail import spec_tables
from treemail.adapters.daemon.settings import Settings, known_keys
from treemail.adapters.runtime.agent_docs import load_agent_docs
from treemail.adapters.ui.cli import main
from treemail.adapters.ui.init import AGENTS, config_text, init
from treemail.core.errors import ConfigError, ConfigExists, ConfigUnknownKey

SPEC = Path(__file__).resolve().parents[2] / "spec"


def _load(tmp_path: Path, text: str) -> Settings:
    (tmp_path / "config.toml").write_text(text, encoding="utf-8")
    return Settings.load(tmp_path)


@pytest.mark.parametrize(("text", "table", "key", "said"), [
    ('[deamon]\nmodel = "openai"\n', "", "deamon", "did you mean [daemon]?"),
    ("[messaging]\nmax_hop = 3\n", "messaging", "max_hop", "did you mean `max_hops`?"),
    ('[daemon]\nmodle = "echo"\n', "daemon", "modle", "did you mean `model`?"),
    ('[daemon.openai]\nbase-url = "http://x"\n', "daemon.openai", "base-url",
     "did you mean `base_url`?"),
    ("[daemon.scripted]\ndelays = 1\n", "daemon.scripted", "delays", "did you mean `delay`?"),
    ("[daemon.limits]\nmax_frame = 1\n", "daemon.limits", "max_frame",
     "did you mean `max_frame_bytes`?"),
    ("[server]\nport = 1\n", "", "server", "unknown table [server] in the top level"),
])
def test_an_unknown_table_or_key_is_refused_with_the_nearest_name(
    tmp_path: Path, text: str, table: str, key: str, said: str
) -> None:
    with pytest.raises(ConfigUnknownKey) as caught:
        _load(tmp_path, text)
    assert caught.value.code == ConfigUnknownKey.code
    assert said in caught.value.message and str(tmp_path / "config.toml") in caught.value.message
    assert caught.value.details["table"] == table and caught.value.details["key"] == key


@pytest.mark.parametrize(("text", "said"), [
    ('[daemon]\nmodel = "gpt"\n', "daemon.model"),
    ('[daemon.openai]\ntimeout = "soon"\n', "daemon.openai.timeout"),
    ("[daemon.openai]\ntimeout = 0\n", "daemon.openai.timeout"),
    ("[daemon.scripted]\ndelay = -1\n", "daemon.scripted.delay"),
    ("daemon = 3\n", "daemon"),
    ("[messaging]\nmax_body_bytes = 0\n", "max_body_bytes"),
    ("[daemon.limits]\nmax_running = 0\n", "max_running"),
])
def test_a_bad_value_is_a_config_error_naming_where(tmp_path: Path, text: str,
                                                    said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert type(caught.value) is ConfigError and caught.value.code == ConfigError.code
    assert said in caught.value.message, caught.value.message


def test_every_key_decodes_to_the_setting_it_names(tmp_path: Path) -> None:
    settings = _load(tmp_path, (
        '[daemon]\nmodel = "openai"\n'
        '[daemon.openai]\nbase_url = "http://h/v1"\nmodel = "m"\napi_key_env = "K"\n'
        "timeout = 7\n[daemon.scripted]\ndelay = 0.5\n[daemon.limits]\nmax_running = 2\n"
        "[messaging]\nmax_hops = 5\n"))
    assert (settings.model, settings.openai.base_url, settings.openai.model,
            settings.openai.api_key_env, settings.openai.timeout) == (
        "openai", "http://h/v1", "m", "K", 7.0)
    assert settings.delay == 0.5 and settings.limits.max_running == 2
    assert settings.messaging.max_hops == 5
    assert settings.source == str(tmp_path / "config.toml")
    assert Settings.load(tmp_path / "none").source == "defaults"


def test_a_config_in_the_working_directory_is_named_when_the_data_dir_is_elsewhere(
    tmp_path: Path,
) -> None:
    data, cwd = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    cwd.mkdir()
    assert Settings().warnings(data, cwd) == []
    (cwd / "config.toml").write_text("[daemon]\n", encoding="utf-8")
    [warning] = Settings().warnings(data, cwd)
    assert f"{cwd / 'config.toml'} is not read" in warning
    assert str(data / "config.toml") in warning
    # The data directory's own config is no stray.
    assert Settings().warnings(cwd, cwd) == []


def test_the_config_doc_is_current_and_names_every_key() -> None:
    text = (SPEC / "config.md").read_text(encoding="utf-8")
    assert text == spec_tables.config_markdown(), spec_tables.REGENERATE
    for table in ("", "daemon", "daemon.openai", "daemon.scripted", "daemon.limits",
                  "messaging"):
        for key in known_keys(table):
            name = f"[{key}]" if not table else f"| `{key}` |"
            assert name in text or f"## [{table}.{key}]" in text or (
                f"## [{key}]" in text), (table, key)


def test_init_writes_a_config_that_parses_strictly_and_two_agents_privately(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "new"
    old = os.umask(0o022)  # a umask that would leave files readable by others
    try:
        assert main(["init", "--data-dir", str(data)]) == 0
    finally:
        os.umask(old)
    out = capsys.readouterr().out
    assert str(data / "config.toml") in out and f"--data-dir {data}" in out
    assert (data / "config.toml").read_text(encoding="utf-8") == config_text()
    assert Settings.load(data) == Settings(source=str(data / "config.toml"))
    assert sorted(load_agent_docs(data / "agents")) == ["helper", "lead"]
    for path in (data / "config.toml", *(data / "agents" / n for n in AGENTS)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for directory in (data, data / "agents"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_init_overwrites_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "agents").mkdir(mode=0o700)
    (tmp_path / "agents" / "lead.md").write_text("mine", encoding="utf-8")
    with pytest.raises(ConfigExists) as caught:
        init(tmp_path)
    assert caught.value.code == ConfigExists.code
    assert caught.value.details["paths"] == [str(tmp_path / "agents" / "lead.md")]
    assert (tmp_path / "agents" / "lead.md").read_text(encoding="utf-8") == "mine"
    assert not (tmp_path / "config.toml").exists()
    assert not (tmp_path / "agents" / "helper.md").exists()
    assert main(["init", "--data-dir", str(tmp_path)]) == 2
    assert ConfigExists.code in capsys.readouterr().err


def test_the_daemon_refuses_a_typo_at_start_and_says_where(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "config.toml").write_text('[deamon]\nmodel = "openai"\n', encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "treemail", "daemon", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert ConfigUnknownKey.code in done.stderr and "did you mean [daemon]?" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (data / "store").exists()  # refused before the directory was taken


def test_the_readme_says_where_config_lives_and_what_init_writes() -> None:
    from treemail.adapters.daemon import logs
    from treemail.adapters.runtime.failures import FailurePolicy

    text = " ".join((SPEC.parent / "README.md").read_text(encoding="utf-8").split())
    assert "`DATA_DIR/config.toml` and `DATA_DIR/agents/*.md`" in text
    assert "treemail init --data-dir DIR" in text
    assert all(f"`agents/{name}`" in text for name in AGENTS)
    assert all(code in text for code in (ConfigExists.code, ConfigUnknownKey.code,
                                         ConfigError.code))
    assert logs.MAX_BYTES == 1 << 20 and "rotated at 1 MiB" in text
    assert f"{logs.BACKUPS} old files" in text.replace("three", "3")
    assert FailurePolicy().limit == 3 and "tried three times" in text
