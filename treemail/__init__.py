"""treemail: durable, permissioned, loop-guarded messaging between agents of a delegation tree.

``import treemail`` gives the verified core; ``treemail.open_store`` opens the embedded LMDB
store it runs on by default.
"""

from treemail.core import *  # noqa: F403
from treemail.core import __all__ as _core_all
from treemail.core.store import Store

__all__ = [*_core_all, "open_store"]


def open_store(path: str, *, sync: bool = True) -> Store:
    """Open (or create) the embedded LMDB store at ``path``; durable on every commit."""
    from treemail.adapters.lmdb_store import LmdbStore

    return LmdbStore.open(path, sync=sync)
