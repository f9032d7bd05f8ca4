"""Envelope rendering is byte-exact to the shared vectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from treemail.core.envelope import render_envelope

VECTORS = Path(__file__).resolve().parents[1] / "vectors" / "envelope.json"


def _cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads(VECTORS.read_text())["cases"]
    return cases


def test_every_vector_is_loaded() -> None:
    assert len(_cases()) >= 4


@pytest.mark.parametrize("case", _cases(), ids=lambda case: str(case["name"]))
def test_render_matches_vector(case: dict[str, Any]) -> None:
    reference = case["sender_handle"] or case["sender_session_id"]
    rendered = render_envelope(reference, case["body"], reply_hint=case["recipient_can_send"])
    assert rendered == case["expected"]
