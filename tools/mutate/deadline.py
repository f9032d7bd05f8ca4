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
timeout can be read back rather than taken on trust.

The normal suite never loads this: only the scratch copies ``tools/mutate/run.py`` makes
name it (``-p mutate_deadline``).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

DEADLINE = float(os.environ.get("TREEMAIL_MUTATE_DEADLINE", "10"))
TIMEOUT_EXIT = 36  # mutmut's status for this exit code is "timeout"
# The tests run in mutants/; a test may change directory, so the log's path is fixed now.
LOG = Path.cwd() / "deadline.log"


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
