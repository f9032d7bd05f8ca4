"""``[messaging]`` settings: contract defaults, strict parsing, and errors that name the key."""

from __future__ import annotations

from typing import Any

import pytest

from treemail.core.config import DEFAULTS, MessagingConfig
from treemail.core.errors import ConfigError, ConfigUnknownKey

CONTRACT_DEFAULTS = {
    "enabled": True,
    "max_hops": 0,
    "max_body_bytes": 32768,
    "max_pending_per_session": 32,
    "max_inflight_per_pair": 4,
    # Not the contract's: treemail's opt-in expiry, off by default so the contract holds.
    "message_ttl_seconds": 0,
}

INT_KEYS = ("max_hops", "max_body_bytes", "max_pending_per_session", "max_inflight_per_pair",
            "message_ttl_seconds")


def _refused(settings: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        MessagingConfig.from_mapping(settings)
    assert caught.value.code == ConfigError.code
    return caught.value


def test_defaults_equal_the_contract() -> None:
    config = MessagingConfig()
    assert {key: getattr(config, key) for key in CONTRACT_DEFAULTS} == CONTRACT_DEFAULTS
    assert dict(DEFAULTS) == CONTRACT_DEFAULTS


def test_absent_table_and_empty_document_mean_defaults() -> None:
    assert MessagingConfig.from_toml("") == MessagingConfig()
    assert MessagingConfig.from_toml("[other]\nx = 1\n") == MessagingConfig()
    assert MessagingConfig.from_toml("[messaging]\n") == MessagingConfig()


def test_from_toml_reads_every_key() -> None:
    config = MessagingConfig.from_toml(
        "[messaging]\n"
        "enabled = false\n"
        "max_hops = 3\n"
        "max_body_bytes = 10\n"
        "max_pending_per_session = 2\n"
        "max_inflight_per_pair = 0\n"
    )
    assert config == MessagingConfig(
        enabled=False,
        max_hops=3,
        max_body_bytes=10,
        max_pending_per_session=2,
        max_inflight_per_pair=0,
    )


def test_partial_table_keeps_the_other_defaults() -> None:
    config = MessagingConfig.from_toml("[messaging]\nmax_hops = -1\n")
    assert config == MessagingConfig(max_hops=-1)
    assert config.max_inflight_per_pair == 4


def test_unknown_key_is_refused_and_named() -> None:
    with pytest.raises(ConfigUnknownKey) as caught:
        MessagingConfig.from_mapping({"max_hop": 2})
    assert caught.value.code == ConfigUnknownKey.code
    assert "`max_hop`" in caught.value.message and "did you mean `max_hops`?" in (
        caught.value.message)
    assert caught.value.details["key"] == "max_hop"


def test_unknown_key_in_toml_is_refused() -> None:
    with pytest.raises(ConfigUnknownKey) as caught:
        MessagingConfig.from_toml("[messaging]\nmax_pending = 3\n")
    assert caught.value.code == ConfigUnknownKey.code
    assert "max_pending" in caught.value.message


def test_invalid_toml_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as caught:
        MessagingConfig.from_toml("[messaging\n")
    assert caught.value.code == ConfigError.code


def test_messaging_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        MessagingConfig.from_toml('messaging = "on"\n')
    assert caught.value.code == ConfigError.code
    assert "[messaging]" in caught.value.message


@pytest.mark.parametrize("value", [1, 0, "true", None, 1.0])
def test_enabled_must_be_a_bool(value: object) -> None:
    error = _refused({"enabled": value})
    assert "enabled" in error.message
    assert error.details["key"] == "enabled"


@pytest.mark.parametrize("key", INT_KEYS)
@pytest.mark.parametrize("value", [True, False, 2.0, "4", None])
def test_integer_keys_refuse_other_types_including_bool(key: str, value: object) -> None:
    error = _refused({key: value})
    assert key in error.message
    assert error.details["key"] == key


@pytest.mark.parametrize("key", INT_KEYS)
def test_bool_for_int_in_toml_is_refused(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        MessagingConfig.from_toml(f"[messaging]\n{key} = true\n")
    assert caught.value.code == ConfigError.code
    assert key in caught.value.message


@pytest.mark.parametrize(
    ("key", "lowest"),
    [("max_body_bytes", 1), ("max_pending_per_session", 1), ("max_inflight_per_pair", 0)],
)
def test_range_lower_bounds(key: str, lowest: int) -> None:
    assert getattr(MessagingConfig.from_mapping({key: lowest}), key) == lowest
    error = _refused({key: lowest - 1})
    assert key in error.message
    assert error.details == {"key": key, "value": lowest - 1}


@pytest.mark.parametrize("value", [-1000, -1, 0, 1, 1000])
def test_max_hops_takes_any_integer(value: int) -> None:
    assert MessagingConfig.from_mapping({"max_hops": value}).max_hops == value


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(ConfigError) as caught:
        MessagingConfig(max_body_bytes=0)
    assert caught.value.code == ConfigError.code
    assert "max_body_bytes" in caught.value.message


@pytest.mark.parametrize("table", [{1: 2}, {None: 1}, {("max_hops",): 1}, {b"max_hops": 1}])
def test_a_key_that_is_not_a_string_is_a_config_error(table: dict[object, object]) -> None:
    with pytest.raises(ConfigError, match="keys must be strings"):
        MessagingConfig.from_mapping(table)  # type: ignore[arg-type]


@pytest.mark.parametrize("table", [[("max_hops", 1)], "max_hops", 3])
def test_a_table_that_is_not_a_mapping_is_a_config_error(table: object) -> None:
    with pytest.raises(ConfigError, match="must be a table"):
        MessagingConfig.from_mapping(table)  # type: ignore[arg-type]


def test_deeply_nested_toml_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        MessagingConfig.from_toml("x = " + "[" * 100_000)
