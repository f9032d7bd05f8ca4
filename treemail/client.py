"""``treemail.client``: the async client of the daemon's protocol 19 (see
``treemail.adapters.daemon.client``), under the short name the CLI docs use."""

from treemail.adapters.daemon.client import DaemonClient, RpcFailure
from treemail.protocol.methods import PROTOCOL_VERSION

__all__ = ["PROTOCOL_VERSION", "DaemonClient", "RpcFailure"]
