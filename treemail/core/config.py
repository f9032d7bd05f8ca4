"""The ``[messaging]`` settings, validated once at load so a bad value never reaches a send."""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Collection, Mapping
from typing import Any, Final

import attrs

from treemail.core.errors import ConfigError, ConfigUnknownKey

__all__ = ["DEFAULTS", "MessagingConfig", "unknown_key"]


@attrs.frozen
class MessagingConfig:
    """Messaging limits. ``max_hops <= 0`` and ``max_inflight_per_pair == 0`` disable a guard."""

    enabled: bool = True
    max_hops: int = 0
    max_body_bytes: int = 32768
    max_pending_per_session: int = 32
    max_inflight_per_pair: int = 4
    # Agent mail left unclaimed longer than this many seconds is discarded as expired; 0 (the
    # default) turns expiry off, and with it every timestamp.
    message_ttl_seconds: int = 0

    def __attrs_post_init__(self) -> None:
        _check_type("enabled", self.enabled, bool)
        for name in ("max_hops", "max_body_bytes", "max_pending_per_session",
                     "max_inflight_per_pair", "message_ttl_seconds"):
            _check_type(name, getattr(self, name), int)
        for name, low in RANGES.items():
            value = getattr(self, name)
            if value < low:
                raise ConfigError(
                    f"[messaging] {name} = {value} is out of range: it must be >= {low}",
                    key=name,
                    value=value,
                )

    @classmethod
    def from_mapping(cls, table: Mapping[str, Any]) -> MessagingConfig:
        """Build from the ``[messaging]`` table; unknown keys are an error, not ignored."""
        if not isinstance(table, Mapping):
            raise ConfigError("[messaging] must be a table of settings, "
                              f"got {type(table).__name__}")
        odd = [key for key in table if not isinstance(key, str)]
        if odd:
            raise ConfigError(f"[messaging] keys must be strings, got {odd[0]!r}; "
                              f"valid keys are {', '.join(DEFAULTS)}", keys=[repr(k) for k in odd])
        unknown = sorted(set(table) - set(DEFAULTS))
        if unknown:
            raise unknown_key("messaging", unknown[0], DEFAULTS)
        return cls(**dict(table))

    @classmethod
    def from_toml(cls, text: str) -> MessagingConfig:
        """Parse a TOML document and read its ``[messaging]`` table (absent means defaults)."""
        try:
            document = tomllib.loads(text)
        # A deeply nested array exhausts the parser's recursion; it is not valid config either.
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise ConfigError(f"config is not valid TOML: {exc}") from exc
        table = document.get("messaging", {})
        if not isinstance(table, dict):
            raise ConfigError("[messaging] must be a table")
        return cls.from_mapping(table)


def unknown_key(table: str, key: str, known: Collection[str],
                where: str = "") -> ConfigUnknownKey:
    """The error for ``key``, unknown in ``table`` (dotted; "" is the top level, whose keys
    are tables), naming the nearest known name: a typo is the usual cause, and a setting
    silently ignored is worse than a refusal."""
    def name(k: str) -> str:
        return f"[{k}]" if not table else f"`{k}`"

    close = difflib.get_close_matches(key, [str(k) for k in known], n=1, cutoff=0.6)
    guess = f"; did you mean {name(close[0])}?" if close else ""
    place = "the top level" if not table else f"[{table}]"
    what = "table" if not table else "key"
    listed = ", ".join(name(str(k)) for k in known) or "none"
    return ConfigUnknownKey(
        f"{where}{': ' if where else ''}unknown {what} {name(key)} in {place}{guess} "
        f"(known: {listed}; every key is documented in spec/config.md)",
        table=table, key=key, suggestion=close[0] if close else None)


def _check_type(name: str, value: object, kind: type) -> None:
    # bool is a subclass of int: `max_hops = true` must not pass as 1.
    if type(value) is not kind:
        raise ConfigError(
            f"[messaging] {name} must be {'true or false' if kind is bool else 'an integer'}, "
            f"got {value!r}",
            key=name,
            value=value,
        )


DEFAULTS: Final[Mapping[str, object]] = {
    field.name: field.default for field in attrs.fields(MessagingConfig)
}

# Lowest valid value per key; max_hops has none since every value <= 0 means "unlimited".
RANGES: Final[Mapping[str, int]] = {
    "max_body_bytes": 1,
    "max_pending_per_session": 1,
    "max_inflight_per_pair": 0,
    "message_ttl_seconds": 0,
}
