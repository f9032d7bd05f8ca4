"""Plugins: observers of the durable feed, gates on tool calls, producers of mail.

The contract adds no messaging-specific hooks: the existing three cover mail. A plugin is any
object with at least one of these hooks (plain or ``async`` functions):

* ``on_event(number, event)``: every durable event, in feed order, exactly once, live while
  the runtime runs. ``replay`` feeds a stored feed to the same hook, for audits.
  ``treemail.core.events.read(event)`` gives its typed payload (an ``UnknownEvent`` for an
  entry this version cannot read, which an observer should show or skip, never fail on).
* ``tool_before_call(session, call)``: before every tool call a model makes, send_message
  included. Raising a ``Refusal`` (``PluginRefusal`` is there for that) refuses the call; its
  code is the tool result the model sees. Any other exception refuses it too, as
  ``plugin:failed``: a gate that breaks must not wave calls through.
* ``attach(handle)``: once at start, with a ``PluginHandle`` whose ``accept`` injects
  plugin-owned mail into a session. Plugin mail never counts against the agent inbox cap.

Plugins load from the ``treemail.plugins`` entry-point group and from ``module:attr`` specs
(a config list). A class is instantiated with no arguments; any other object is used as is.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Protocol, TypeAlias, runtime_checkable

from treemail.adapters.runtime.llm import ToolCall
from treemail.core.engine import Engine
from treemail.core.errors import PluginFailed, PluginLoadError, PluginRefusal, Refusal
from treemail.core.records import Event, Owner, Session

__all__ = [
    "ENTRY_POINT_GROUP",
    "Attachable",
    "EventObserver",
    "FeedFollower",
    "Plugin",
    "PluginFailed",
    "PluginHandle",
    "PluginHost",
    "PluginLoadError",
    "PluginRefusal",
    "ToolGate",
    "load_plugins",
    "load_spec",
    "replay",
]

ENTRY_POINT_GROUP = "treemail.plugins"

Hooked: TypeAlias = Awaitable[None] | None


@runtime_checkable
class EventObserver(Protocol):
    def on_event(self, number: int, event: Event) -> Hooked: ...


@runtime_checkable
class ToolGate(Protocol):
    def tool_before_call(self, session: Session, call: ToolCall) -> Hooked: ...


@runtime_checkable
class Attachable(Protocol):
    def attach(self, handle: PluginHandle) -> Hooked: ...


Plugin: TypeAlias = EventObserver | ToolGate | Attachable
AcceptMail = Callable[[str, str, Owner, str | None], Awaitable[str]]


class PluginHandle:
    """What the runtime gives a plugin: a way to inject mail, as the plugin."""

    def __init__(self, name: str, accept: AcceptMail) -> None:
        self.name = name
        self._accept = accept

    async def accept(self, session_id: str, body: str, *,
                     idempotency_key: str | None = None) -> str:
        """Durably accept ``body`` as plugin mail for ``session_id`` and wake it; returns the
        message id. The body is capped at 256 KiB of UTF-8, as on the wire
        (``PluginBodyTooLarge``). With ``idempotency_key``, a retry of the same mail returns
        the first message id (see ``treemail.core.producers``). Raises ``EngineShutdown``
        once the runtime is shutting down."""
        return await self._accept(session_id, body, Owner.PLUGIN, idempotency_key)


async def _settle(result: Hooked) -> None:
    if inspect.isawaitable(result):
        await result


def _name(plugin: object) -> str:
    return getattr(plugin, "name", None) or type(plugin).__qualname__


class PluginHost:
    """The loaded plugins, sorted by hook; it is the toolbox's ``Hooks``."""

    def __init__(self, plugins: Sequence[Plugin] = ()) -> None:
        self.plugins = list(plugins)
        self.observers = [p for p in self.plugins if isinstance(p, EventObserver)]
        self.gates = [p for p in self.plugins if isinstance(p, ToolGate)]
        # An observer that raises is recorded here and skipped for that event; the feed goes
        # on, since one broken plugin must not stop every other observer.
        self.errors: list[tuple[str, BaseException]] = []

    async def attach(self, accept: AcceptMail) -> None:
        for plugin in self.plugins:
            if isinstance(plugin, Attachable):
                await _settle(plugin.attach(PluginHandle(_name(plugin), accept)))

    async def tool_before_call(self, session: Session, call: ToolCall) -> None:
        for gate in self.gates:
            try:
                await _settle(gate.tool_before_call(session, call))
            except Refusal:
                raise
            except Exception as exc:
                self.errors.append((_name(gate), exc))
                raise PluginFailed(
                    f"plugin {_name(gate)} failed while checking {call.name} "
                    f"({type(exc).__name__}: {exc}); the call was refused, nothing ran",
                    plugin=_name(gate),
                ) from exc

    async def observe(self, number: int, event: Event) -> None:
        for observer in self.observers:
            try:
                await _settle(observer.on_event(number, event))
            except Exception as exc:
                self.errors.append((_name(observer), exc))


class FeedFollower:
    """Follows the global feed live and hands each event to the observers once, in order.

    ``read`` fetches the feed after a number (on the runtime's writer thread). ``notify`` is
    called after each write; the follower also polls every ``interval`` seconds, so an event
    whose write nobody reported is still seen."""

    def __init__(
        self,
        read: Callable[[int], Awaitable[list[tuple[int, Event]]]],
        host: PluginHost,
        after: int,
        interval: float = 0.05,
    ) -> None:
        self.after = after
        self._read = read
        self._host = host
        self._interval = interval
        self._dirty = asyncio.Event()
        self._lock = asyncio.Lock()
        self._stopping = False

    def notify(self) -> None:
        self._dirty.set()

    def stop(self) -> None:
        """End ``follow`` after its current pump. Stopping rather than cancelling it: a pump
        cut short inside an observer would hand that event over again at the next pump."""
        self._stopping = True
        self._dirty.set()

    async def pump(self) -> None:
        """Deliver everything appended since the last pump. One pump at a time, so events
        are neither skipped nor delivered twice."""
        async with self._lock:
            for number, event in await self._read(self.after):
                await self._host.observe(number, event)
                self.after = number

    async def follow(self) -> None:
        while not self._stopping:
            try:
                async with asyncio.timeout(self._interval):
                    await self._dirty.wait()
            except TimeoutError:
                pass
            self._dirty.clear()
            await self.pump()


async def replay(engine: Engine, observer: EventObserver, after: int = 0) -> int:
    """Feed the stored feed after ``after`` to ``observer``; returns how many events."""
    count = 0
    for number, event in engine.feed(after):
        await _settle(observer.on_event(number, event))
        count += 1
    return count


# -- loading -------------------------------------------------------------------------------


def load_plugins(
    specs: Iterable[str] = (), *, group: str | None = ENTRY_POINT_GROUP
) -> list[Plugin]:
    """Entry points of ``group`` (None: none), then each ``module:attr`` spec, in order."""
    found: list[Plugin] = []
    if group is not None:
        for point in sorted(entry_points(group=group), key=lambda p: p.name):
            found.append(_from_entry_point(point))
    found.extend(load_spec(spec) for spec in specs)
    return found


def load_spec(spec: str) -> Plugin:
    """One ``module:attr`` spec (``attr`` may be dotted)."""
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise PluginLoadError(f"plugin spec {spec!r} must be 'module:attr'", spec=spec)
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise PluginLoadError(f"plugin spec {spec!r}: cannot import {module_name}: {exc}",
                              spec=spec) from exc
    for part in attr.split("."):
        if not hasattr(target, part):
            raise PluginLoadError(f"plugin spec {spec!r}: {module_name} has no {attr}",
                                  spec=spec)
        target = getattr(target, part)
    return _plugin(target, repr(spec))


def _from_entry_point(point: EntryPoint) -> Plugin:
    where = f"entry point {point.name} = {point.value!r} (group {point.group})"
    try:
        target = point.load()
    except Exception as exc:
        raise PluginLoadError(f"{where} failed to load: {type(exc).__name__}: {exc}",
                              spec=point.value) from exc
    return _plugin(target, where)


def _plugin(target: object, where: str) -> Plugin:
    if isinstance(target, type):
        try:
            target = target()
        except Exception as exc:
            raise PluginLoadError(f"plugin {where}: {type(exc).__name__}: {exc} when created "
                                  "with no arguments", spec=where) from exc
    if isinstance(target, EventObserver | ToolGate | Attachable):
        return target
    raise PluginLoadError(f"plugin {where} has none of the hooks on_event, tool_before_call, "
                          "attach", spec=where)
