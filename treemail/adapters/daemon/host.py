"""Hosting the runtime in a data directory: what ``treemail daemon`` runs.

The data directory holds ``store/`` (the LMDB store, whose owner lock is the daemon's hold
on the directory: see ``lock.py``), ``daemon.sock``, ``daemon.token`` (once ``--tcp`` was
used; see ``tcp.py``), ``daemon.log`` (``logs.py``), an optional ``config.toml`` (decoded
strictly: ``settings.py``), an optional ``agents/`` directory of agent docs, and
``registered-agents/``, the docs clients defined (``registered.py``).
The config's ``[messaging]`` table sets the limits of mail, ``[daemon.limits]`` those of
each connection (``connection.Limits``); ``[daemon] model`` names the model adapter:

* ``scripted`` (the default): a deterministic agent that delegates, steers and answers its
  mail as its agent doc's directives say (``scripted.py``), so a daemon's tree converses with
  no network and no key; ``echo``: one that only notes what it read;
* ``openai``: an OpenAI-compatible endpoint, from ``[daemon.openai]`` ``base_url``, ``model``
  and ``api_key_env`` (the name of the variable holding the key, never the key itself).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path

import attrs

from treemail.adapters.daemon import registered
from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.datadir import take
from treemail.adapters.daemon.errors import ListenFailed
from treemail.adapters.daemon.feeds import FeedSignal, Subscriptions, WireGate
from treemail.adapters.daemon.handlers import install
from treemail.adapters.daemon.listener import check_socket_path
from treemail.adapters.daemon.lock import DAEMON_ROLE
from treemail.adapters.daemon.logs import daemon_logging
from treemail.adapters.daemon.ownership import Ownership
from treemail.adapters.daemon.scripted import ScriptedAgent, ScriptedEcho
from treemail.adapters.daemon.server import Daemon
from treemail.adapters.daemon.settings import Settings
from treemail.adapters.daemon.tcp import TOKEN_FILE, Token, loopback
from treemail.adapters.runtime.agent_docs import build_agents, load_agent_docs
from treemail.adapters.runtime.ids import UuidIds
from treemail.adapters.runtime.runtime import Runtime
from treemail.adapters.store.leases import SoleLeases, leases_of
from treemail.core.errors import TreemailError

__all__ = ["DEFAULT_DATA_DIR", "ScriptedAgent", "ScriptedEcho", "Settings", "open_daemon",
           "run_daemon"]

_log = logging.getLogger("treemail.daemon")

DEFAULT_DATA_DIR = "./.treemail"


async def open_daemon(data_dir: Path, socket: Path, limits: Limits | None = None,
                      tcp: tuple[str, int] | None = None, store_url: str | None = None,
                      settings: Settings | None = None) -> Daemon:
    """Take the data directory (open its store as its one writer: ``lock.py``), start the
    runtime (recovering what a crash left), and bind the socket (and ``tcp``, a loopback
    ``(host, port)``, with the data directory's token). Raises ``DataDirLocked`` if
    another process holds it, ``NotLoopback`` for a TCP address off loopback,
    ``SocketPathTaken`` or ``SocketInUse`` for a socket path that holds a file or a live
    socket, and ``ListenFailed`` if a bind fails. ``store_url`` names the store to serve (by
    default ``DATA_DIR/store``; see ``treemail.adapters.store.factory``)."""
    if tcp is not None:
        loopback(*tcp)  # refused before anything is touched
    check_socket_path(socket)  # so is a file that is not a socket (listener.py)
    store = take(data_dir, socket, store_url)  # the one lock (lock.py): first of all
    try:
        token = Token.load_or_create(data_dir) if tcp is not None else None
        settings = settings or Settings.load(data_dir)
        agents_dir = data_dir / "agents"
        files = load_agent_docs(agents_dir) if agents_dir.is_dir() else {}
        kept, docs = registered.Registered.open(data_dir / registered.REGISTERED_DIR, files)
    except BaseException:
        store.close()
        raise
    signal, gate = FeedSignal(), WireGate()
    leases = leases_of(store)
    # Heard through NOTIFY, other daemons' events need only a slow poll behind it.
    heard = settings.wakeups == "notify" and not isinstance(leases, SoleLeases)
    runtime = Runtime(store, UuidIds(), build_agents(docs, settings.model_for),
                      settings.messaging, plugins=[signal, gate],
                      feed_interval=1.0 if heard else 0.02, budget=settings.budget,
                      idle_timeout=settings.actor_idle_timeout)
    daemon = Daemon(runtime, store, settings.model_for, Subscriptions(runtime, signal),
                    limits or settings.limits)
    daemon.registered = kept
    gate.connections = lambda: daemon.connections
    install(daemon)
    # A store daemons share (PostgreSQL): this one drives the trees it holds leases on.
    ownership = Ownership(leases, runtime, str(socket), settings.lease_seconds,
                          settings.wakeups)
    ownership.guard(daemon)
    daemon.give_up = ownership.stop
    await runtime.start(await ownership.start())
    ownership.begin()
    where = str(socket)
    try:
        await daemon.listen_unix(socket)
        if tcp is not None and token is not None:
            where = f"tcp {tcp[0]}:{tcp[1]}"
            daemon.tcp = await daemon.listen_tcp(*tcp, token)
            store.own({"role": DAEMON_ROLE, "socket": str(socket),
                                  "tcp": daemon.tcp})
    except (OSError, TreemailError) as exc:
        daemon.request_stop()
        await daemon.stopped.wait()
        if isinstance(exc, TreemailError):  # SocketInUse: another daemon serves the path
            raise
        raise ListenFailed(f"cannot listen on {where}: {exc.strerror or exc}; free it or "
                           "choose another address", address=where) from None
    return daemon


@attrs.define
class _Stopper:
    """The daemon's signal handler, in place before the daemon is: a signal that comes while
    it starts is kept, and acted on once it has started (both run on the loop's thread)."""

    daemon: Daemon | None = None
    asked: bool = False

    def __call__(self) -> None:
        self.asked = True
        if self.daemon is not None:
            self.daemon.request_stop()


async def run_daemon(data_dir: Path, socket: Path | None, stdio: bool,
                     tcp: tuple[str, int] | None = None, store_url: str | None = None) -> int:
    socket = socket or data_dir / "daemon.sock"
    # The config first: a typo in it is refused before anything is taken or bound.
    settings = Settings.load(data_dir)
    with daemon_logging() as logs:
        return await _serve(data_dir, socket, stdio, tcp, store_url, settings, logs)


async def _serve(data_dir: Path, socket: Path, stdio: bool, tcp: tuple[str, int] | None,
                 store_url: str | None, settings: Settings,
                 logs: Callable[[Path], None]) -> int:
    # The handlers come first: the socket accepts clients as soon as open_daemon binds it,
    # and from then on a SIGTERM must stop the daemon in order, not kill it outright.
    stopper = _Stopper()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopper)
    daemon = stopper.daemon = await open_daemon(data_dir, socket, tcp=tcp, store_url=store_url,
                                                settings=settings)
    logs(data_dir)  # the file log only once the directory is this daemon's (lock.py)
    if stopper.asked:  # a signal came while it started: stop now that it can
        daemon.request_stop()
    extra = (f" and tcp://{daemon.tcp} (token in {data_dir / TOKEN_FILE})"
             if daemon.tcp else "")
    _log.info("serving %s on %s%s (pid %d); %s", data_dir, socket, extra, os.getpid(),
              settings.describe())
    for warning in settings.warnings(data_dir, Path.cwd()):
        _log.warning("%s", warning)
    if stdio:
        stdio_task = asyncio.create_task(daemon.serve_stdio(), name="stdio")
    await daemon.stopped.wait()
    if stdio:
        await asyncio.gather(stdio_task, return_exceptions=True)
    _log.info("stopped")
    return 0
