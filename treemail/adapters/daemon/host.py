"""Hosting the runtime in a data directory: what ``treemail daemon`` runs.

The data directory holds ``store/`` (the LMDB store, whose owner lock is the daemon's hold
on the directory: see ``lock.py``), ``daemon.sock``, ``daemon.token`` (once ``--tcp`` was
used; see ``tcp.py``), an optional ``config.toml``, an optional ``agents/`` directory of
agent docs, and ``registered-agents/``, the docs clients defined (``registered.py``).
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
import contextlib
import os
import signal
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from treemail.adapters.daemon import registered
from treemail.adapters.daemon.connection import Limits
from treemail.adapters.daemon.datadir import take
from treemail.adapters.daemon.feeds import FeedSignal, Subscriptions, WireGate
from treemail.adapters.daemon.handlers import install
from treemail.adapters.daemon.listener import check_socket_path
from treemail.adapters.daemon.lock import DAEMON_ROLE
from treemail.adapters.daemon.scripted import ScriptedAgent, ScriptedEcho
from treemail.adapters.daemon.server import Daemon
from treemail.adapters.daemon.tcp import TOKEN_FILE, Token, loopback
from treemail.adapters.runtime.agent_docs import build_agents, load_agent_docs
from treemail.adapters.runtime.ids import UuidIds
from treemail.adapters.runtime.llm import Model, OpenAICompatibleModel
from treemail.adapters.runtime.runtime import Runtime
from treemail.core.config import MessagingConfig
from treemail.core.errors import ConfigError, ListenFailed, TreemailError

__all__ = ["DEFAULT_DATA_DIR", "ScriptedAgent", "ScriptedEcho", "Settings", "open_daemon",
           "run_daemon"]

DEFAULT_DATA_DIR = "./.treemail"
_SCRIPTED: dict[str, type[ScriptedAgent | ScriptedEcho]] = {
    "scripted": ScriptedAgent, "echo": ScriptedEcho}
_MODELS = (*_SCRIPTED, "openai")


@attrs.frozen
class Settings:
    messaging: MessagingConfig = attrs.field(factory=MessagingConfig)
    model: str = "scripted"
    openai: Mapping[str, Any] = attrs.field(factory=dict)
    delay: float = 0.0
    limits: Limits = attrs.field(factory=Limits)

    @classmethod
    def load(cls, data_dir: Path) -> Settings:
        path = data_dir / "config.toml"
        if not path.exists():
            return cls()
        try:
            document = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc})") from exc
        daemon = document.get("daemon", {})
        model = daemon.get("model", "scripted")
        if model not in _MODELS:
            raise ConfigError(f"{path}: [daemon] model = {model!r}; use one of "
                              f"{', '.join(_MODELS)}")
        delay = daemon.get("scripted", {}).get("delay", 0.0)
        if not isinstance(delay, int | float) or delay < 0:
            raise ConfigError(f"{path}: [daemon.scripted] delay must be seconds >= 0")
        return cls(MessagingConfig.from_mapping(document.get("messaging", {})), model,
                   dict(daemon.get("openai", {})), float(delay),
                   Limits.from_mapping(daemon.get("limits", {}), f"{path}: [daemon.limits]"))

    def model_for(self, agent: str, doc_model: str | None) -> Model:
        if self.model in _SCRIPTED:
            return _SCRIPTED[self.model](self.delay)
        key_env = str(self.openai.get("api_key_env", "OPENAI_API_KEY"))
        base_url = self.openai.get("base_url")
        if not base_url:
            raise ConfigError("[daemon.openai] base_url is required with model = openai")
        return OpenAICompatibleModel(str(base_url), os.environ.get(key_env),
                                     doc_model or str(self.openai.get("model", "")))


async def open_daemon(data_dir: Path, socket: Path, limits: Limits | None = None,
                      tcp: tuple[str, int] | None = None, store_url: str | None = None) -> Daemon:
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
        settings = Settings.load(data_dir)
        agents_dir = data_dir / "agents"
        files = load_agent_docs(agents_dir) if agents_dir.is_dir() else {}
        kept, docs = registered.Registered.open(data_dir / registered.REGISTERED_DIR, files)
    except BaseException:
        store.close()
        raise
    signal, gate = FeedSignal(), WireGate()
    runtime = Runtime(store, UuidIds(), build_agents(docs, settings.model_for),
                      settings.messaging, plugins=[signal, gate], feed_interval=0.02)
    daemon = Daemon(runtime, store, settings.model_for, Subscriptions(runtime, signal),
                    limits or settings.limits)
    daemon.registered = kept
    gate.connections = lambda: daemon.connections
    install(daemon)
    await runtime.start()
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
    # The handlers come first: the socket accepts clients as soon as open_daemon binds it,
    # and from then on a SIGTERM must stop the daemon in order, not kill it outright.
    stopper = _Stopper()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopper)
    daemon = stopper.daemon = await open_daemon(data_dir, socket, tcp=tcp, store_url=store_url)
    if stopper.asked:  # a signal came while it started: stop now that it can
        daemon.request_stop()
    extra = (f" and tcp://{daemon.tcp} (token in {data_dir / TOKEN_FILE})"
             if daemon.tcp else "")
    print(f"treemail daemon: serving {data_dir} on {socket}{extra} (pid {os.getpid()})",
          file=sys.stderr, flush=True)
    if stdio:
        stdio_task = asyncio.create_task(daemon.serve_stdio(), name="stdio")
    await daemon.stopped.wait()
    if stdio:
        await asyncio.gather(stdio_task, return_exceptions=True)
    with contextlib.suppress(OSError):
        print("treemail daemon: stopped", file=sys.stderr, flush=True)
    return 0
