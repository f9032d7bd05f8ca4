"""treemail: durable, permissioned, loop-guarded messaging between agents of a delegation tree.

``import treemail`` gives the verified core; ``treemail.open_store`` opens a store by its URL
(a directory for the embedded LMDB store it runs on by default, ``memory:``, or
``postgresql://...``).
"""

import os

from treemail.core import *  # noqa: F403
from treemail.core import __all__ as _core_all
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.store import Store

__all__ = [*_core_all, "open_engine", "open_store"]


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
    from treemail.adapters.runtime.ids import UuidIds

    engine = Engine(open_store(url, sync=sync), UuidIds(), config)
    engine.recover()
    return engine
