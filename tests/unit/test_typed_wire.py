"""A renamed method or field is a type error at every use: one mypy run over a snippet that
uses the wire right once and wrong in each way, every wrong line flagged, the right one not."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.typecheck import mypy_errors

SNIPPET = '''
from treemail.adapters.daemon.client import Call, DaemonClient
from treemail.adapters.daemon.connection import Connection
from treemail.adapters.daemon.routes import Routes
from treemail.protocol import methods as m
from treemail.protocol import types as t

routes = Routes()


async def right(c: DaemonClient) -> str:
    view = await c.request(m.SESSION_GET, t.SessionGetParams(session_id="s"))
    pages = await c.every(m.SESSION_LIST, t.SessionListParams())
    return (view.handle or "") + pages[0].session_id


async def wrong(c: DaemonClient) -> None:
    await c.request(m.SESSION_GETT, t.SessionGetParams(session_id="s"))  # WRONG method name
    await c.request(m.SESSION_GET, t.SessionListParams())  # WRONG params type
    await c.request(m.SESSION_GET, t.SessionGetParams(sesion_id="s"))  # WRONG field name
    await c.request(m.SESSION_GET, t.SessionGetParams(session_id=1))  # WRONG field type
    view = await c.request(m.SESSION_GET, t.SessionGetParams(session_id="s"))
    print(view.sessions)  # WRONG result field
    await c.every(m.SESSION_GET, t.SessionGetParams(session_id="s"))  # WRONG not paged
    Call(m.RUN_SUBMIT, t.RunSteerParams(session_id="s", text="x"))  # WRONG pipelined params
    await c.next_notification(m.EVENTS_EVENT).subscription  # WRONG notification field


class Handlers:
    @routes.handles(m.SESSION_GET)
    async def good(self, conn: Connection, p: t.SessionGetParams) -> t.SessionView:
        raise NotImplementedError

    @routes.handles(m.SESSION_GET)  # WRONG handler params
    async def bad_params(self, conn: Connection, p: t.RunGetParams) -> t.SessionView:
        raise NotImplementedError

    @routes.handles(m.RUN_GET)  # WRONG handler result
    async def bad_result(self, conn: Connection, p: t.RunGetParams) -> t.SessionView:
        raise NotImplementedError
'''


def test_mypy_flags_each_wrong_use_of_the_wire_and_only_those(tmp_path: Path) -> None:
    # mypy in a subprocess, as the other typed-vocabulary tests run it: in-process, mypy
    # raises the interpreter's recursion limit for good, and a later test in the same worker
    # (the JSON nesting bound) would then see another limit than the daemon has.
    wrong = {n for n, line in enumerate(SNIPPET.splitlines(), 1) if "# WRONG" in line}
    errors = mypy_errors(tmp_path, {"snippet": SNIPPET})["snippet"]
    flagged = {int(n) for n in re.findall(r"^:(\d+): error", "\n".join(errors), re.MULTILINE)}
    assert flagged == wrong, (sorted(wrong - flagged), sorted(flagged - wrong), errors)
