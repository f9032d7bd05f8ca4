"""A pytest plugin for the adapters' mutation runs only: a test past its deadline ends the run
as a mutmut timeout.

A mutant that stops the writer thread (or strands a batch) leaves a test awaiting an answer
that never comes, or joining a thread that never ends. mutmut's own bound for such a mutant is
generous: 15 times (1 s plus the clean time of every test that covers the function), and only
then is the process killed, so each one cost half a minute on the writer and minutes on the
store, more on a loaded machine. Here every test (setup, call and teardown) gets
``TREEMAIL_MUTATE_DEADLINE`` seconds (10 by default; no test of the adapters' selections takes
a second on a clean run) and then a watchdog process ends it with SIGXCPU, the signal of
mutmut's own wall-time bound, which mutmut reads as a timeout: whatever the test is blocked
in, a thread join, an event loop, or a C call that holds the GIL (a thread of the test
process could not act then).
Each expiry is logged (the mutant and the test) to ``deadline.log`` beside the tests, so a
timeout can be read back rather than taken on trust. And each run starts with the store's
decode caches empty (see ``_CACHES``).

The normal suite never loads this: only the scratch copies ``tools/mutate/run.py`` makes
name it (``-p mutate_deadline``).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

DEADLINE = float(os.environ.get("TREEMAIL_MUTATE_DEADLINE", "10"))
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
    if "__mutmut_" not in os.environ.get("MUTANT_UNDER_TEST", ""):
        # mutmut's clean and stats runs ("", "stats") run in its own process: a test slowed
        # past the deadline by the load must not end mutmut itself. Only mutants are bounded.
        yield
        return
    watch = _watchdog()
    os.write(watch, item.nodeid.encode("unicode_escape") + b"\n")
    try:
        yield
    finally:
        os.write(watch, b"\n")  # done: no deadline until the next test starts


# The pipe to this process's watchdog, by pid: mutmut forks each mutant's process from one
# that ran the clean tests here, and a fork must not report to its parent's watchdog (which
# would end the parent).
_watch: dict[int, int] = {}


def _watchdog() -> int:
    """The pipe to a watchdog process, started at the first test: a thread of this process
    would need the GIL to act, and a mutant that deadlocks in a C call holding it (py-lmdb
    waiting on its own write lock) never lets it run. The watchdog shares nothing with us: it
    reads each test's start (its node id) and end (an empty line), and ends this process with
    SIGXCPU, the signal of mutmut's own wall-time bound, which mutmut counts as a timeout."""
    parent = os.getpid()
    if parent not in _watch:
        read, write = os.pipe()
        if os.fork() == 0:
            os.close(write)
            _watch_over(parent, read)
        os.close(read)
        _watch[parent] = write
    return _watch[parent]


def _watch_over(parent: int, pipe: int) -> NoReturn:  # pragma: no cover - the watchdog
    current, started, pending = None, 0.0, b""
    while True:
        wait = None if current is None else max(0.0, started + DEADLINE - time.monotonic())
        if not select.select([pipe], [], [], wait)[0]:  # the test is past its deadline
            with LOG.open("a", encoding="utf-8") as log:
                log.write(f"{os.environ.get('MUTANT_UNDER_TEST', '')}\t{current}\t"
                          f"{DEADLINE:g}s\n")
            os.kill(parent, signal.SIGXCPU)
            os._exit(0)
        data = os.read(pipe, 4096)
        if not data:  # the test process ended
            os._exit(0)
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            current = line.decode("unicode_escape") if line else None
            started = time.monotonic()
