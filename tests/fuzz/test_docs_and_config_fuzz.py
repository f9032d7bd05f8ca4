"""Agent docs and the config loader, fed arbitrary and near-valid input: a parsed value or
``AgentDocError`` / ``ConfigError``, never another exception."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.conftest import TALLY
from tests.fuzz.strategies import JSON, TEXT
from treemail.core.agents import parse_agent_doc
from treemail.core.config import DEFAULTS, MessagingConfig
from treemail.core.errors import AgentDocError, ConfigError

# Pieces of YAML that have hurt loaders: aliases, tags, dates, escapes, nesting, duplicates.
_YAML = (
    "name: a\n", "name: b\n", "description: x\n", "model: m\n", "permissions:\n",
    "  message:\n", "    child: allow\n", "    Child: allow\n", '    "*": ask\n',
    "  delegate:\n", "    explore: deny\n", "&a [x, x]\n", "*a\n", "x: &b 1\n", "y: *b\n",
    "!!float abc\n", "!!timestamp 2020-02-30\n", "2020-02-30\n", '"\\U00110000"\n',
    "!!python/object:os.system\n", "[[[[[[[[[[[[[[[[[[[[\n", "{a: {b: {c: {d: 1}}}}\n",
    "? [1]\n: 2\n", "<<: *a\n", "\t\n", "- x\n", "---\n", "...\n", "%YAML 1.1\n",
)

DOCS = st.one_of(
    TEXT,
    st.lists(st.one_of(st.sampled_from(_YAML), TEXT), max_size=10).map(
        lambda parts: "---\n" + "".join(parts) + "\n---\nprompt\n"),
)


@given(text=DOCS)
def test_agent_docs(text: str) -> None:
    try:
        parse_agent_doc(text, source="fuzz.md")
    except AgentDocError as exc:
        TALLY["agent docs"][f"typed error {exc.details.get('problem', exc.code)}"] += 1
        assert exc.message.startswith("fuzz.md")
    else:
        TALLY["agent docs"]["parsed"] += 1


_KEYS = st.one_of(st.sampled_from(sorted(DEFAULTS)), TEXT, st.integers(), st.none())
_TOML = (
    "[messaging]\n", "enabled = true\n", "max_hops = 3\n", "max_hops = -1\n",
    "max_body_bytes = 0\n", "max_body_bytes = 99999999999999999999\n", "max_hops = 1.5\n",
    "messaging = 3\n", "[messaging.x]\n", "unknown = 1\n", "x = [[[[[[[[\n", "= =\n",
    "max_pending_per_session = \"2\"\n", "max_inflight_per_pair = true\n",
)


@given(table=st.dictionaries(_KEYS, JSON, max_size=5))
def test_config_mappings(table: dict[Any, Any]) -> None:
    _config(lambda: MessagingConfig.from_mapping(table), "config mapping")


@given(text=st.one_of(TEXT, st.lists(st.one_of(st.sampled_from(_TOML), TEXT), max_size=8)
                      .map("".join)))
def test_config_toml(text: str) -> None:
    _config(lambda: MessagingConfig.from_toml(text), "config toml")


def _config(load: Any, surface: str) -> None:
    try:
        load()
    except ConfigError:
        TALLY[surface]["typed error config:invalid"] += 1
    else:
        TALLY[surface]["loaded"] += 1
