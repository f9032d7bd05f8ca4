"""Agent docs registered over the wire, kept so a restarted daemon still knows them.

``session.create`` may define agents inline (``agent_doc``, ``agent_docs``). Their sessions
outlive the daemon in the store, so each doc is written, as given, to
``DATA_DIR/registered-agents/NAME.md`` before its agent is used, and a starting daemon loads
them beside ``DATA_DIR/agents/``.

Writing. Registrations of one name are serialised (an asyncio lock per name, held until the
live agent is replaced too, so the file and the running agent always agree). Each doc goes
to a temporary file of its own (``mkstemp``, 0600), fsynced, then renamed over ``NAME.md``
and the directory fsynced: a crash, a full disk or a concurrent registration leaves the old
doc or the new one, never a torn one. Every temporary file of a request is written before any
is renamed, so a request that fails (a full disk, a name too long for the file system)
renames nothing and removes its temporaries: the docs stay as they were.

Who wins a name. The user's own ``agents/`` directory. A name one of its docs defines cannot
be registered over the wire (``daemon:agent_defined_by_file``, naming the file to edit)
unless the doc registered is that same definition; and a starting daemon that finds a name
in both (a registration older than the user's file, or kept by an older treemail) runs the
user's file and says on stderr which registered doc it leaves unused. So editing
``agents/NAME.md`` (to ``"*": deny``, say) takes effect at the next start, always: no
registration keeps a permission the user's file removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path

from treemail.adapters.daemon.errors import AgentDefinedByFile
from treemail.adapters.runtime.agent_docs import load_agent_docs
from treemail.adapters.store.private import private_dir, private_files
from treemail.core.agents import AgentDoc
from treemail.core.errors import (
    AgentDocError,
    StorageError,
    StoreFull,
    TreemailError,
)
from treemail.protocol.methods import SESSION_CREATE

__all__ = ["REGISTERED_DIR", "Registered", "save"]

REGISTERED_DIR = "registered-agents"
_TEMPORARY = ".tmp"  # never ``.md``: a leftover is not a doc, and is removed at start


class Registered:
    """The daemon's registered docs: where they are kept, and the names the user's own
    ``agents/`` files hold (their docs, by name), which registrations may not change."""

    def __init__(self, directory: Path, files: Mapping[str, AgentDoc]) -> None:
        self.directory = directory
        self.files = dict(files)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    @classmethod
    def open(cls, directory: Path,
             files: Mapping[str, AgentDoc]) -> tuple[Registered, dict[str, AgentDoc]]:
        """At start (the data directory held): make the kept docs private, remove what a
        crashed write left, and return them with ``files`` over them (see the module doc)."""
        kept: dict[str, AgentDoc] = {}
        if directory.is_dir():
            private_dir(directory, markers=None)  # the daemon's own: repaired, never refused
            for leftover in directory.glob(f".*{_TEMPORARY}"):
                leftover.unlink(missing_ok=True)
            private_files(directory)
            kept = load_agent_docs(directory)
        for name in sorted(kept.keys() & files.keys()):
            if _definition(kept[name]) != _definition(files[name]):
                print(f"treemail daemon: agent {name!r} is defined by {files[name].source} and "
                      f"was also registered over the wire ({kept[name].source}); the file in "
                      f"agents/ wins, the registered doc is not used: delete it to silence "
                      "this", file=sys.stderr, flush=True)
        return cls(directory, files), {**kept, **files}

    async def keep(self, docs: Sequence[tuple[AgentDoc, str]],
                   live: Callable[[], None]) -> None:
        """Keep ``docs`` (each with its text) durably, then make them ``live``, under each
        name's lock. Refuses a name the user's files define. Once begun it runs to its end
        even if the request is cancelled (its client gone): the file and the running agent
        must not part ways, nor a lock be let go while a write still runs."""
        for doc, _ in docs:
            self._check(doc)
        work = asyncio.ensure_future(self._keep(docs, live))
        work.add_done_callback(_retrieved)
        await asyncio.shield(work)

    async def _keep(self, docs: Sequence[tuple[AgentDoc, str]],
                    live: Callable[[], None]) -> None:
        names = sorted({doc.spec.name for doc, _ in docs})
        async with contextlib.AsyncExitStack() as held:
            for name in names:  # one order for every request: two never wait on each other
                await held.enter_async_context(self._lock(name))
            kept = [(doc, text) for doc, text in docs if doc.spec.name not in self.files]
            if kept:
                await asyncio.to_thread(save, self.directory, kept)
            live()

    def _check(self, doc: AgentDoc) -> None:
        name = doc.spec.name
        own = self.files.get(name)
        if own is not None and _definition(own) != _definition(doc):
            raise AgentDefinedByFile(
                f"agent {name!r} is defined by {own.source}, and the data directory's "
                "agents/ files are not replaced over the wire: edit that file (the daemon "
                "reads it when it starts) or register this doc under another name",
                agent=name, path=own.source)

    @contextlib.asynccontextmanager
    async def _lock(self, name: str) -> AsyncIterator[None]:
        # A lock lives while someone holds or awaits it, so failed names leave nothing.
        lock, users = self._locks.get(name, (asyncio.Lock(), 0))
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)


def _retrieved(work: asyncio.Future[None]) -> None:
    """Take the outcome of a keep whose request was cancelled: nobody else will."""
    if not work.cancelled():
        work.exception()


def _definition(doc: AgentDoc) -> tuple[object, ...]:
    return doc.spec, doc.model, doc.prompt


def save(directory: Path, docs: Sequence[tuple[AgentDoc, str]]) -> None:
    """Keep each (doc, its text) durably in ``directory``, one file a name; all or none."""
    private_dir(directory, markers=None)
    for doc, _ in docs:
        _check_length(directory, doc.spec.name)
    written: list[tuple[str, Path]] = []
    try:
        for doc, text in docs:
            written.append((doc.spec.name, _temporary(directory, text.encode("utf-8"))))
        while written:
            name, temporary = written[0]
            os.replace(temporary, directory / f"{name}.md")
            written.pop(0)
    except OSError as exc:
        raise _not_kept(directory, docs, exc) from exc
    finally:
        for _, temporary in written:  # what was not renamed
            temporary.unlink(missing_ok=True)
    where = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(where)  # the renames themselves survive a crash
    finally:
        os.close(where)


def _temporary(directory: Path, data: bytes) -> Path:
    """A new private file holding ``data``, fsynced; removed again if writing it fails."""
    fd, name = tempfile.mkstemp(prefix=".", suffix=_TEMPORARY, dir=directory)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(name)
        raise
    os.close(fd)
    return Path(name)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _check_length(directory: Path, name: str) -> None:
    limit = os.pathconf(directory, "PC_NAME_MAX")
    size = len(f"{name}.md".encode())
    if size > limit:
        raise AgentDocError(
            f"agent name {name[:40]!r}... is {len(name.encode())} bytes: the daemon keeps a "
            f"registered agent in a file named after it, and the file system allows "
            f"{limit - 3} bytes for it; choose a shorter name (nothing was registered)",
            source=SESSION_CREATE.name, field="name", problem="bad_name", agent=name)


def _not_kept(directory: Path, docs: Sequence[tuple[AgentDoc, str]],
              exc: OSError) -> TreemailError:
    names = ", ".join(sorted({doc.spec.name for doc, _ in docs}))
    what = f"cannot keep the agent docs of {names} in {directory}"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StoreFull(f"{what}: the disk is full; free space and retry (nothing was "
                         "registered)", path=str(directory))
    if exc.errno == errno.ENAMETOOLONG:
        return AgentDocError(f"{what}: a name is too long for the file system; choose a "
                             "shorter name (nothing was registered)", source=SESSION_CREATE.name,
                             field="name", problem="bad_name")
    return StorageError(f"{what}: {exc.strerror or exc}; fix that and retry (nothing was "
                        "registered)", path=str(directory))
