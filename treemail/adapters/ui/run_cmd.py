"""``treemail run`` and ``treemail cancel``: give an agent a task, and take a run back.

``run AGENT TASK`` creates a session of AGENT, the root of a new tree, with TASK as its first
user input (one ``session.create``: both are kept or neither); with ``--parent SESSION`` the
new session is a delegated child of SESSION in its tree instead, and TASK arrives as its
delegation mail (``session.delegate``). ``--follow`` then prints the session's events as
``tail`` does, until the run that took the task ends: status 0 when it finished, 1 when it
was interrupted (cancelled, out of budget, its model failing for good), with the reason on
stderr. A run interrupted before it consumed the task, while the session has another run
coming (a model failure under the retry policy), is followed on into that run: the task is
still to be done. One interrupted after it consumed the task ends the follow, whatever wakes
the session later (a child's result).

``cancel SESSION`` ends the session's run in flight (``run.cancel``): interrupted "cancelled
by user", its claimed mail released and kept for the session's next input.
"""

from __future__ import annotations

import argparse
import sys

import msgspec

from treemail.adapters.daemon.client import DaemonClient
from treemail.adapters.ui import feed
from treemail.adapters.ui.commands import Sub, client_command, json_line
from treemail.adapters.ui.terminal import visible
from treemail.protocol import methods as m
from treemail.protocol import types as t

__all__ = ["register"]

def register(commands: Sub) -> None:
    run = client_command(commands, "run", "give an agent a task: a new session (or a child "
                         "of --parent) runs it", _run)
    run.add_argument("agent", help="the agent's name (an agent doc's, or default, explore)")
    run.add_argument("task", type=_task, help="the task: the session's first input")
    run.add_argument("--parent", metavar="SESSION",
                     help="delegate it: the new session is a child of SESSION (UUID, handle "
                          "or UUID prefix) in SESSION's tree")
    run.add_argument("--follow", action="store_true",
                     help="print the session's events until its run ends; status 1 if the "
                          "run was interrupted")
    cancel = client_command(commands, "cancel", "cancel a session's run in flight; its "
                            "claimed mail is released for the next input", _cancel)
    cancel.add_argument("session", help="the session (UUID, handle or UUID prefix)")


def _task(text: str) -> str:
    # Refused before anything is created: a session must not be left without its task.
    if not text.strip():
        raise argparse.ArgumentTypeError("the task is empty; say what the agent should do")
    return text


async def _run(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.daemon.lookup import session_id

    # The feed's end before the session exists: following from there misses none of its
    # events, however fast its run goes.
    head = (await client.request(m.EVENTS_READ, t.EventsReadParams(after=0, limit=1))).head
    # One request each way, the session and its task in one store transaction: a refused
    # task leaves no idle session behind.
    if args.parent is None:
        session = await client.request(m.SESSION_CREATE, t.SessionCreateParams(
            agent=args.agent, task=args.task))
    else:
        parent = await session_id(client, args.parent)
        session = await client.request(m.SESSION_DELEGATE, t.SessionDelegateParams(
            parent_session_id=parent, agent=args.agent, task=args.task))
    sid = session.session_id
    # The task's message: the user mail, or the delegation mail (its first mail either way).
    task = (await client.request(m.MESSAGE_LIST, t.MessageListParams(
        session_id=sid, limit=1))).messages[0].message_id
    if args.json:
        json_line(msgspec.to_builtins({"session": session, "task_message_id": task}))
    else:
        how = (f"task accepted as message {task}" if args.parent is None
               else f"delegated by {args.parent} as message {task}")
        print(visible(f"session {session.handle or sid} ({sid}) runs {session.agent}: "
                      f"{how}"), flush=True)
    if not args.follow:
        if not args.json:
            print(f"follow it with `treemail tail {sid}`; stop it with `treemail cancel "
                  f"{sid}`", file=sys.stderr)
        return 0
    return await _follow(client, args, sid, task, head)


async def _follow(client: DaemonClient, args: argparse.Namespace, sid: str, task: str,
                  head: int) -> int:
    """Print the session's events after ``head`` until the run that took the task ends."""
    from treemail.adapters.ui.console import console, print_row
    from treemail.core.events import EventKind

    names, out = feed.Names(client), console()
    await feed.subscribe(client, sid, head)
    async for view in feed.subscribed(client):
        if args.json:
            json_line(msgspec.to_builtins(view))
        else:
            print_row(await names.row(view), out)
        if view.kind == EventKind.RUN_FINISHED:
            print(f"treemail run: the run of {sid} finished", file=sys.stderr)
            return 0
        if view.kind == EventKind.RUN_INTERRUPTED:
            if await _retried(client, sid, task, view.seq):
                continue
            reason = dict(view.data).get("reason")
            print(visible(f"treemail run: the run of {sid} was interrupted: {reason}"),
                  file=sys.stderr)
            return 1
    return 1  # unreachable: the subscription ends only by the daemon's going away


async def _retried(client: DaemonClient, sid: str, task: str, interrupted: int) -> bool:
    """Whether the task is left to a run after the one interrupted at seq ``interrupted``:
    that run had not consumed it, and a later run has (its end is still to come on the
    feed), or one is queued or running now. Read from the log's order, not from the state
    alone: a quick retry may have finished before this asks."""
    from treemail.core.events import EventKind
    from treemail.core.lifecycle import SessionState

    history = (await client.request(m.MESSAGE_GET, t.MessageGetParams(message_id=task))).history
    consumed = [step.seq for step in history
                if step.kind == EventKind.PRODUCER_MESSAGE_CONSUMED]
    if consumed:
        return bool(consumed[0] > interrupted)
    session = await client.request(m.SESSION_GET, t.SessionGetParams(session_id=sid))
    # A state of a later protocol cannot be told to hold a run: report the interruption
    # rather than wait on a run that may never come.
    return isinstance(session.state, SessionState) and session.state.has_run


async def _cancel(client: DaemonClient, args: argparse.Namespace) -> int:
    from treemail.adapters.daemon.lookup import session_id

    cancelled = await client.request(m.RUN_CANCEL, t.RunCancelParams(
        session_id=await session_id(client, args.session)))
    if args.json:
        json_line(msgspec.to_builtins(cancelled))
        return 0
    run, session = cancelled.run, cancelled.session
    print(visible(f"run #{run.number} of {session.handle or session.session_id} "
                  f"{run.status} (cancelled by user); its mail waits for the session's "
                  "next input"))
    return 0
