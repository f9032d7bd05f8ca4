"""A process that sends mail on a PostgreSQL store until it is killed (SIGKILL).

Usage: ``python -m tests.postgres.send_worker URL ROOT RUN CHILD MODE FIRST``

Every send is ``send_message`` from ROOT's run RUN to CHILD's handle, as tool call
``call-N`` (its idempotency key) with body ``note N``, from N = FIRST on.

* ``hang``: one send (N = FIRST) inside a group-commit batch whose rows the server already
  holds (sent, not committed); then ``ready`` on stdout, and a sleep until it is killed.
* ``loop``: sends N = FIRST, FIRST+1, ...; after each returns, ``ack N MESSAGE_ID`` on
  stdout (flushed): from then on the caller has seen the success.
"""

from __future__ import annotations

import sys
import time

from tests.crash.worker import CONFIG
from treemail.adapters.runtime.ids import UuidIds
from treemail.adapters.store.factory import open_store
from treemail.adapters.store.group_commit import GroupStore
from treemail.core.engine import Engine
from treemail.core.records import ToolContext


def main(url: str, root: str, run: str, child: str, mode: str, first: int) -> None:
    store = GroupStore(open_store(url))
    engine = Engine(store, UuidIds(), CONFIG)

    def send(n: int) -> str:
        return engine.send_message(ToolContext(root, run, f"call-{n}"),
                                   {"to": child, "body": f"note {n}"}).message_id

    if mode == "hang":
        def hang() -> None:
            send(first)
            with store.read() as tx:
                list(tx.pending(root))  # a scan: the queued rows go to the server now
            print("ready", flush=True)
            time.sleep(600)

        store.batch(hang)
        return
    n = first
    while True:
        print(f"ack {n} {send(n)}", flush=True)
        n += 1


if __name__ == "__main__":
    url, root, run, child, mode, first = sys.argv[1:7]
    main(url, root, run, child, mode, int(first))
