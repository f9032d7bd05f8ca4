"""The generated half of ``spec/``: tables and diagrams derived from the code they describe.

Every table here is a pure function of ``treemail.core``: the lifecycles (with the meaning
of each trigger, its ``Event``'s name) come from the
flattened machine classes, the errors from the registry (``errors.registry()``, the core's
and every layer's, each with its JSON-RPC
code from ``treemail.protocol.errors``, the one wire mapping), the event payloads from
``treemail.core.events``, the settings from
``MessagingConfig``, ``DEFAULTS`` and ``RANGES``, the guards from ``sending.GUARDS``.
The tool schemas of ``spec/schemas`` are written here too, from ``treemail.core.tools``.
Only meanings that the code states in comments (not in anything importable) live in the
dicts below; a derivation refuses a dict that misses a name or holds a stale one, so they
cannot drift either. ``python -m treemail.spec_tables`` rewrites the generated files;
``--check`` only reports which of them are stale. ``tests/unit/test_spec.py`` runs the check.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import attrs
import msgspec

from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.errors import ClientFailure
from treemail.adapters.runtime.model_errors import ModelError
from treemail.adapters.store import errors as _store_errors  # noqa: F401
from treemail.core import errors, events
from treemail.core.config import DEFAULTS, RANGES
from treemail.core.lifecycle import (
    APPROVAL,
    MESSAGE,
    REQUEST,
    RUN,
    SESSION,
    ApprovalLifecycle,
    ApprovalState,
    Lifecycle,
    MessageLifecycle,
    MessageState,
    RequestLifecycle,
    RequestState,
    RunLifecycle,
    RunState,
    SessionLifecycle,
    SessionState,
)
from treemail.core.records import AgentSpec, Session
from treemail.core.runs import request_log
from treemail.core.sending import GUARDS, _recipient_state
from treemail.core.tools import schema_files
from treemail.core.transitions import message_event, session_event
from treemail.protocol.errors import jsonrpc_code
from treemail.protocol.rpc_errors import ProtocolError

__all__ = [
    "REGENERATE",
    "SPEC_DIR",
    "approval_table",
    "config_table",
    "errors_table",
    "events_table",
    "generated_files",
    "guards_table",
    "lifecycle_markdown",
    "main",
    "mermaid",
    "message_table",
    "render_json",
    "run_table",
    "session_table",
]

Table = dict[str, Any]
S = TypeVar("S", bound=enum.StrEnum)
T = TypeVar("T", bound=enum.StrEnum)

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"
REGENERATE = ".venv/bin/python -m treemail.spec_tables"

_MEANINGS: Mapping[str, Mapping[str, str]] = {
    "message states": {
        MessageState.ACCEPTED: "persisted in the recipient's log; the send has succeeded",
        MessageState.ADMITTED: "taken into pending input, bound to the running run (steer) or "
        "the next run",
        MessageState.CLAIMED: "inside a model request being built at a safe boundary",
        MessageState.RELEASED: "its request did not commit; waits for the next boundary",
        MessageState.CONSUMED: "its request committed: it is in the transcript, exactly once",
        MessageState.DISCARDED: "dropped by an explicit decision, with a reason",
    },
    "session states": {
        SessionState.IDLE: "no run; created, or its last run was interrupted",
        SessionState.QUEUED: "a run is wanted and waits to start",
        SessionState.RUNNING: "a run is executing; steer mail joins it at the next safe boundary",
        SessionState.FINISHED: "its last run completed its task; new mail wakes it",
    },
    "run states": {
        RunState.QUEUED: "wanted; the session is queued and the run waits to start",
        RunState.RUNNING: "executing: the model is called request by request",
        RunState.FINISHED: "completed its task",
        RunState.INTERRUPTED: "cancelled, or found dead at restart",
    },
    "approval states": {
        ApprovalState.PENDING: "held: the call waits for the user's answer",
        ApprovalState.APPROVED: "the user approved it; the call ran and its outcome is kept",
        ApprovalState.DENIED: "the user denied it; the call was answered permission denied",
    },
    "request states": {
        RequestState.NO_REQUEST: "between model requests: a safe boundary",
        RequestState.REQUEST_OPEN: "a model request is open and holds the mail it claimed",
    },
    "config": {
        "enabled": "master switch; false refuses every send with send_message:disabled",
        "max_hops": "longest allowed chain of agent mail; <= 0 disables the hop guard",
        "max_body_bytes": "largest body, in UTF-8 bytes",
        "max_pending_per_session": "pending agent mail a recipient may hold; more is refused",
        "max_inflight_per_pair": "pending mail per directed sender-recipient pair; 0 disables",
        "message_ttl_seconds": "agent mail left unclaimed this many seconds is discarded as "
        "expired at its recipient's next boundary or reconcile (claimed time never counts); "
        "0 disables",
    },
    "limits": {
        "max_frame_bytes": "largest JSON-RPC frame a client may send, in bytes",
        "max_in_flight": "requests of one connection awaiting their answers at once",
        "out_frames": "frames queued to a connection before the daemon stops reading it",
        "read_chunk": "bytes read from a connection at a time",
        "peer_timeout": "seconds a server-to-client request (a gate ask) may take",
        "auth_timeout": "seconds a TCP peer has to prove it holds the token",
        "auth_bytes": "bytes a TCP peer may send before it has proved itself",
        "max_unauthenticated": "TCP connections still proving themselves at once",
        "max_held_bytes": "the byte budget: answers and notifications one connection may "
        "make the daemon hold",
        "max_running": "requests of one connection building their answers at once",
        "max_subscriptions": "events.subscribe subscriptions per connection",
    },
    "guards anytime": {
        "engine_shutdown": "the send raced shutdown; nothing was accepted",
    },
}

# Checked whenever a send races shutdown, whatever the position in GUARDS.
_ANYTIME: Mapping[str, tuple[type[errors.TreemailError], ...]] = {
    "engine_shutdown": (errors.EngineShutdown,),
}

_FAMILIES = (
    ("definition", errors.DefinitionError),
    ("refusal", errors.Refusal),
    ("storage", errors.StorageError),
    ("model", ModelError),
    ("note", errors.ToolNote),
    ("protocol", ProtocolError),
    ("client", ClientFailure),
)


def _meanings(group: str, names: Sequence[str]) -> Mapping[str, str]:
    table = _MEANINGS[group]
    if set(table) != set(names):
        raise ValueError(
            f"spec_tables: the {group} meanings do not match the code: missing "
            f"{sorted(set(names) - set(table))}, stale {sorted(set(table) - set(names))}"
        )
    return table


def _transitions(lifecycle: Lifecycle[S, T]) -> list[tuple[T, S, S]]:
    """(trigger, from, to), in declaration order of triggers, then of states."""
    return [
        (trigger, state, lifecycle.transitions[(state, trigger)])
        for trigger in lifecycle.triggers
        for state in lifecycle.states
        if (state, trigger) in lifecycle.transitions
    ]


def _lifecycle_table(
    lc: Lifecycle[S, T], machine: type[Any], group: str,
    state_facts: Callable[[S], Table], log_kind: Callable[[T, S], str],
) -> Table:
    """A machine's states with their meanings, and its transitions with their trigger's
    meaning, which the machine declares on the trigger's ``Event``."""
    states = _meanings(f"{group} states", lc.states)
    return {
        "machine": lc.name,
        "summary": " ".join((machine.__doc__ or "").split()),
        "initial": lc.initial,
        "final": [s for s in lc.states if lc.is_final(s)],
        "states": [
            {"name": s, "meaning": states[s], "initial": s == lc.initial,
             "final": lc.is_final(s), **state_facts(s)}
            for s in lc.states
        ],
        "triggers": list(lc.triggers),
        "transitions": [
            {"trigger": t, "from": a, "to": b, "meaning": lc.meanings[t],
             "log_kind": log_kind(t, b)}
            for t, a, b in _transitions(lc)
        ],
    }


def message_table() -> Table:
    """States carry the log kind recorded on entry (acceptance included) and the pending and
    deliverable flags the guards and delivery read."""
    return _lifecycle_table(
        MESSAGE, MessageLifecycle, "message",
        lambda s: {"pending": s.pending, "deliverable": s.deliverable,
                   "log_kind": message_event(s)},
        lambda _trigger, target: message_event(target),
    )


def _reported(state: SessionState) -> str:
    """What send_message reports as recipient_state for a recipient in ``state``."""
    probe = Session("-", "-", None, AgentSpec("probe"), None, 0, state=state)
    return _recipient_state(probe).value


def session_table() -> Table:
    """Session log kinds belong to triggers, not states; states carry the recipient_state."""
    return _lifecycle_table(
        SESSION, SessionLifecycle, "session",
        lambda s: {"recipient_state": _reported(s), "has_run": s.has_run},
        lambda trigger, _target: session_event(trigger),
    )


def run_table() -> Table:
    """A run's own machine, and the machine of its model request nested under ``request``.
    A run's changes are logged as the session's ``Run*`` events; requests as ``Request*``."""
    table = _lifecycle_table(
        RUN, RunLifecycle, "run", lambda _s: {},
        lambda trigger, _target: session_event(trigger.session),
    )
    table["request"] = _lifecycle_table(
        REQUEST, RequestLifecycle, "request", lambda _s: {},
        lambda trigger, _target: request_log(trigger) or "",
    )
    return table


def approval_table() -> Table:
    """A tool call held by an ``ask`` rule; both answers are logged ``ApprovalAnswered``."""
    return _lifecycle_table(
        APPROVAL, ApprovalLifecycle, "approval", lambda _s: {},
        lambda _trigger, _target: events.ApprovalAnswered.KIND,
    )


def _error_classes() -> list[type[errors.TreemailError]]:
    """Every class of the registry: the core's and those each layer registered (this module
    imports every layer's errors module, so all have)."""
    return errors.registry()


def _family(cls: type[errors.TreemailError]) -> str:
    return next(name for name, root in _FAMILIES if issubclass(cls, root))


def errors_table() -> Table:
    rows = [
        {"code": cls.code, "class": cls.__name__, "family": _family(cls),
         "base": cls.__bases__[0].__name__, "jsonrpc_code": jsonrpc_code(cls),
         "meaning": " ".join((cls.__doc__ or "").split())}
        for cls in _error_classes()
    ]
    return {"root": errors.TreemailError.__name__, "errors": sorted(rows, key=lambda r: r["code"])}


def events_table() -> Table:
    """Every event kind with its payload class and the JSON Schema of its stored data."""
    return {
        "tolerance": " ".join((events.UnknownEvent.__doc__ or "").split()),
        "kinds": [
            {"kind": cls.KIND.value, "class": cls.__name__, "schema": events.schema(cls)}
            for cls in events.PAYLOADS
        ],
    }


def config_table() -> Table:
    meanings = _meanings("config", list(DEFAULTS))
    return {
        "section": "messaging",
        "keys": [
            {"key": key, "type": type(default).__name__, "default": default,
             "min": RANGES.get(key), "meaning": meanings[key]}
            for key, default in DEFAULTS.items()
        ],
    }


def config_markdown() -> str:
    """spec/config.md: every table and key of ``DATA_DIR/config.toml``, from the code that
    reads them (``daemon/settings.py``, ``core/config.py``, ``connection.Limits``)."""
    from treemail.adapters.daemon import settings

    lines = [
        "# config.toml", "",
        "<!-- generated by `" + REGENERATE + "` from treemail/adapters/daemon/settings.py; "
        "do not edit -->", "",
        "The daemon reads `DATA_DIR/config.toml` (`./.treemail/config.toml` by default; "
        "`--data-dir` moves it) at start, and only there: a `config.toml` in the working "
        "directory is not read (the daemon warns when it sees one). Without the file every "
        "key has its default. `treemail init` writes a commented one. An unknown table or "
        f"key is refused at start as `{errors.ConfigUnknownKey.code}`, naming the nearest "
        f"known one; a value of the wrong type or out of range as `{errors.ConfigError.code}`.",
        "",
    ]
    messaging = _meanings("config", list(DEFAULTS))
    rows = [(key, type(default).__name__, default,
             messaging[key] + (f" (at least {RANGES[key]})" if key in RANGES else ""))
            for key, default in DEFAULTS.items()]
    lines += _config_section("[messaging]", "The limits of agent mail.", rows)
    for table, struct in (("[daemon]", settings.DaemonTable),
                          ("[daemon.openai]", settings.OpenAITable),
                          ("[daemon.scripted]", settings.ScriptedTable),
                          ("[daemon.cluster]", settings.ClusterTable),
                          ("[runs]", settings.RunsTable)):
        doc = " ".join((struct.__doc__ or "").split())
        lines += _config_section(table, doc.split(": ", 1)[-1].replace("``", "`"),
                                 _struct_rows(struct))
    limits = _meanings("limits", [f.name for f in attrs.fields(Limits)])
    rows = [(f.name, _type_name(f.type), f.default, limits[f.name] + " (> 0)")
            for f in attrs.fields(Limits)]
    lines += _config_section("[daemon.limits]",
                             "What each client connection may make the daemon hold and wait "
                             "for (spec/protocol.md, section 3).", rows)
    return "\n".join(lines)


def _config_section(table: str, what: str, rows: Sequence[tuple[str, str, object, str]]
                    ) -> list[str]:
    out = [f"## {table}", "", what, "", "| key | type | default | meaning |",
           "|---|---|---|---|"]
    out += [f"| `{key}` | {kind} | `{json.dumps(default)}` | {meaning} |"
            for key, kind, default, meaning in rows]
    return [*out, ""]


def _struct_rows(struct: type[msgspec.Struct]) -> list[tuple[str, str, object, str]]:
    hints = typing.get_type_hints(struct, include_extras=True)
    rows = []
    for field in msgspec.structs.fields(struct):
        hint = hints[field.name]
        metas = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, msgspec.Meta)]
        if not metas:  # a sub-table, documented in its own section
            continue
        meta = metas[0]
        kind = _type_name(typing.get_args(hint)[0])
        bound = (f" (at least {meta.ge})" if meta.ge is not None
                 else f" (> {meta.gt})" if meta.gt is not None else "")
        rows.append((field.name, kind, field.default, f"{meta.description}{bound}"))
    return rows


def _type_name(kind: object) -> str:
    if typing.get_origin(kind) is typing.Literal:
        return " \\| ".join(f'`"{v}"`' for v in typing.get_args(kind))
    if isinstance(kind, type):
        return kind.__name__
    return str(kind)


def guards_table() -> Table:
    """The order is ``GUARDS`` itself: names, codes and meanings come from its entries."""
    anytime = _meanings("guards anytime", list(_ANYTIME))
    return {
        "order": [{"guard": g.name, "codes": [cls.code for cls in g.errors],
                   "description": g.doc} for g in GUARDS],
        "anytime": [{"guard": name, "codes": [cls.code for cls in codes],
                     "description": anytime[name]} for name, codes in _ANYTIME.items()],
    }


def mermaid(lifecycle: Lifecycle[Any, Any]) -> str:
    """A ``stateDiagram-v2`` of ``lifecycle``: its initial state, transitions and final states."""
    lines = ["stateDiagram-v2", f"    [*] --> {lifecycle.initial}"]
    lines += [f"    {a} --> {b} : {e}" for e, a, b in _transitions(lifecycle)]
    lines += [f"    {s} --> [*]" for s in lifecycle.states if lifecycle.is_final(s)]
    return "\n".join(lines) + "\n"


def _diagram(title: str, lifecycle: Lifecycle[Any, Any], summary: str, notes: str) -> str:
    return f"## {title} (`{lifecycle.name}`)\n\n{summary}\n\n```mermaid\n" \
        f"{mermaid(lifecycle)}```\n\n{notes}\n"


def lifecycle_markdown() -> str:
    message, session = message_table(), session_table()
    pending = ", ".join(s["name"] for s in message["states"] if s["pending"])
    kinds = ", ".join(f"{s['name']} → {s['log_kind']}" for s in message["states"])
    runs = ", ".join(dict.fromkeys(f"{t['trigger']} → {t['log_kind']}"
                                   for t in session["transitions"]))
    header = (
        f"<!-- GENERATED by treemail/spec_tables.py from treemail/core; do not edit.\n"
        f"     Regenerate with: {REGENERATE} -->\n\n# Lifecycles\n\n"
        "The transition tables behind these diagrams are in `message_lifecycle.json`,\n"
        "`session_lifecycle.json`, `run_lifecycle.json` and `approval_lifecycle.json`;\n"
        "`README.md` explains them.\n\n"
    )
    return header + _diagram(
        "Message", MESSAGE, message["summary"],
        f"Pending states: {pending}. Event-log kind on entry: {kinds}.",
    ) + "\n" + _diagram(
        "Session", SESSION, session["summary"],
        f"No final state: mail wakes a finished session. Event-log kind per trigger: {runs}.",
    ) + "\n" + _diagram(
        "Run", RUN, " ".join((RunLifecycle.__doc__ or "").split()),
        "A run's changes are logged by its session's events (above).",
    ) + "\n" + _diagram(
        "Model request", REQUEST, " ".join((RequestLifecycle.__doc__ or "").split()),
        "Derived from the run's `open_request` (none: `no_request`). `end` is the check "
        "a finish or interrupt passes.",
    ) + "\n" + _diagram(
        "Approval", APPROVAL, " ".join((ApprovalLifecycle.__doc__ or "").split()),
        "Both answers are logged `ApprovalAnswered`; approving also records the grant.",
    )


def render_json(table: Mapping[str, Any]) -> str:
    return json.dumps(table, indent=2, ensure_ascii=False) + "\n"


def generated_files() -> dict[str, str]:
    """Every generated file of spec/, by path relative to it, with its exact text; the tool
    schemas come from ``treemail.core.tools`` so that one command regenerates all of spec/."""
    tables = {
        "message_lifecycle.json": message_table(),
        "session_lifecycle.json": session_table(),
        "run_lifecycle.json": run_table(),
        "approval_lifecycle.json": approval_table(),
        "errors.json": errors_table(),
        "events.json": events_table(),
        "config.json": config_table(),
        "guards.json": guards_table(),
    }
    files = {name: render_json(table) for name, table in tables.items()}
    files["lifecycle.md"] = lifecycle_markdown()
    files["config.md"] = config_markdown()
    return {**files, **schema_files()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m treemail.spec_tables",
                                     description="Regenerate the derived files of spec/.")
    parser.add_argument("--out", type=Path, default=SPEC_DIR, help="the spec directory")
    parser.add_argument("--check", action="store_true", help="report stale files, write none")
    options = parser.parse_args(argv)
    stale = []
    for name, text in generated_files().items():
        path = options.out / name
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(name)
        if not options.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    verb = "stale" if options.check else "written"
    print(f"{verb}: {', '.join(stale) or 'none'}")
    return 1 if options.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
