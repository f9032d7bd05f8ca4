"""A pytest plugin for the adapters' mutation runs only: a test past its deadline ends the run
as a mutmut timeout.

A mutant that stops the writer thread (or strands a batch) leaves a test awaiting an answer
that never comes, or joining a thread that never ends. mutmut's own bound for such a mutant is
generous: 15 times (1 s plus the clean time of every test that covers the function), and only
then is the process killed, so each one cost half a minute on the writer and minutes on the
store, more on a loaded machine. Here every test (setup, call and teardown) gets
``TREEMAIL_MUTATE_DEADLINE`` seconds (10 by default; no test of the adapters' selections takes
a second on a clean run) and then the process exits at once with the exit code mutmut reads
as a timeout (36), whatever the test is blocked in: a C call, a thread join or an event loop.
Each expiry is logged (the mutant and the test) to ``deadline.log`` beside the tests, so a
timeout can be read back rather than taken on trust. And each run starts with the store's
decode caches empty (see ``_CACHES``).

The normal suite never loads this: only the scratch copies ``tools/mutate/run.py`` makes
name it (``-p mutate_deadline``).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

DEADLINE = float(os.environ.get("TREEMAIL_MUTATE_DEADLINE", "10"))
TIMEOUT_EXIT = 36  # mutmut's status for this exit code is "timeout"
# The tests run in mutants/; a test may change directory, so the log's path is fixed now.
LOG = Path.cwd() / "deadline.log"


# Module-level caches the store fills as it decodes. mutmut runs the clean tests in the
# process its mutant workers are forked from, so each worker would start with them filled, and
# a mutant of the code that fills them (the codec's decoder per kind, the steady rows' decoded
# records) would never run: it survived there, yet the tests kill it in a fresh process. Each
# run here starts with them empty, as a fresh ``pytest`` does.
_CACHES = (("treemail.adapters.store.codec", "_decoders", "clear"),
           ("treemail.adapters.store.lmdb_txn", "_decode_steady", "cache_clear"))


def pytest_configure(config: pytest.Config) -> None:
    for module, name, empty in _CACHES:
        cache = getattr(sys.modules.get(module), name, None)
        if cache is not None:
            getattr(cache, empty)()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    timer = threading.Timer(DEADLINE, _expire, args=(item.nodeid,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _expire(nodeid: str) -> None:
    with LOG.open("a", encoding="utf-8") as log:
        log.write(f"{os.environ.get('MUTANT_UNDER_TEST', '')}\t{nodeid}\t{DEADLINE:g}s\n")
    os._exit(TIMEOUT_EXIT)
