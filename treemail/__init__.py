"""treemail: durable, permissioned, loop-guarded messaging between agents of a delegation tree.

``import treemail`` gives the verified core; ``treemail.open_store`` opens the embedded LMDB
store it runs on by default.
"""

from treemail.core import *  # noqa: F403
from treemail.core import __all__ as _core_all
from treemail.core.config import MessagingConfig
from treemail.core.engine import Engine
from treemail.core.store import Store

__all__ = [*_core_all, "open_engine", "open_store"]


def open_store(path: str, *, sync: bool = True, durability: str = "fsync") -> Store:
    """Open (or create) the embedded LMDB store at ``path``. ``durability`` ``fsync`` (the
    default): a commit survives power loss; ``process``: a process crash, and is faster
    (``treemail.adapters.store.durability`` gives the LMDB flags and guarantees of each)."""
    from treemail.adapters.store.lmdb_store import LmdbStore

    return LmdbStore.open(path, sync=sync, durability=durability)


def open_engine(path: str, config: MessagingConfig | None = None, *, sync: bool = True) -> Engine:
    """Open the LMDB store at ``path`` and an engine on it, recovered: runs that died with the
    last process are interrupted, their claimed mail released, and every session with pending
    mail made deliverable again."""
    from treemail.adapters.runtime.ids import UuidIds

    engine = Engine(open_store(path, sync=sync), UuidIds(), config)
    engine.recover()
    return engine
