"""treemail: durable, permissioned, loop-guarded messaging between agents of a delegation tree.

``import treemail`` gives the verified core; ``treemail.open_store`` opens a store by its URL
(a directory for the embedded LMDB store it runs on by default, ``memory:``, or
``postgresql://...``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from treemail import core as _core

if TYPE_CHECKING:
    from treemail.core import *  # noqa: F403
    from treemail.core.config import MessagingConfig
    from treemail.core.engine import Engine
    from treemail.core.store import Store

__all__ = [*_core.__all__, "open_engine", "open_store"]


if not TYPE_CHECKING:  # to mypy the names are the imports above: a typo stays an error

    def __getattr__(name: str) -> Any:
        # The core's names, imported on first use as the core imports them (see its
        # docstring): ``treemail --version`` must not load the engine.
        return getattr(_core, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def open_store(url: str | os.PathLike[str], *, sync: bool = True, durability: str = "fsync",
               readonly: bool = False) -> Store:
    """Open (or create) the store ``url`` names: a directory or ``lmdb:PATH`` (the embedded
    LMDB store), ``memory:``, or ``postgresql://...`` (``treemail.adapters.store.factory``
    lists the forms). ``durability`` ``fsync`` (the default): a commit survives power loss;
    ``process``: a process crash, and is faster (``treemail.adapters.store.durability``)."""
    from treemail.adapters.store.factory import open_store as open_url

    return open_url(url, sync=sync, durability=durability, readonly=readonly)


def open_engine(url: str | os.PathLike[str], config: MessagingConfig | None = None, *,
                sync: bool = True) -> Engine:
    """Open the store ``url`` names (as ``open_store``) and an engine on it, recovered: runs
    that died with the last process are interrupted, their claimed mail released, and every
    session with pending mail made deliverable again."""
    from treemail.adapters.runtime.clock import WallClock
    from treemail.adapters.runtime.ids import UuidIds
    from treemail.core.engine import Engine

    engine = Engine(open_store(url, sync=sync), UuidIds(), config, clock=WallClock())
    engine.recover()
    return engine
