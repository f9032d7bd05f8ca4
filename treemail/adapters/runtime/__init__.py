"""The runtime wing: the asyncio runtime (``runtime``) and its single writer thread
(``writer``), the session actors, the tool box, plugins, agent docs, and the model adapters
(``llm``: ``models`` already names the reference model).

It imports the store wing and the core; the daemon and the user's tools sit above it.
``Runtime`` and ``Agent`` are re-exported here, the names an embedding program uses.
"""

from treemail.adapters.runtime.runtime import Agent, Runtime

__all__ = ["Agent", "Runtime"]
