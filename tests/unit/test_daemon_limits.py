"""``[daemon.limits]``: each limit of a connection can be set; a wrong one stops the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.host import Settings
from treemail.core.errors import ConfigError


def test_the_table_sets_the_limits_it_names_and_keeps_the_others(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        "[daemon.limits]\nmax_held_bytes = 65536\npeer_timeout = 0.5\n")
    limits = Settings.load(tmp_path).limits
    assert limits == Limits(max_held_bytes=65536, peer_timeout=0.5)
    assert limits.max_subscriptions == Limits().max_subscriptions


@pytest.mark.parametrize(("table", "named"), [
    ({"max_held": 1}, "no limit 'max_held'"),
    ({"max_running": 0}, "max_running must be a number > 0"),
    ({"max_subscriptions": True}, "max_subscriptions must be a number > 0"),
    ({"max_held_bytes": 1.5}, "max_held_bytes must be a whole number"),
    ({"peer_timeout": "30"}, "peer_timeout must be a number > 0"),
    (3, "must be a table"),
])
def test_a_wrong_limit_is_a_config_error_that_names_it(table: object, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Limits.from_mapping(table)  # type: ignore[arg-type]
    assert named in caught.value.message
