"""The store wing: the embedded LMDB store (``lmdb_store``, its transactions ``lmdb_txn``, its
format and files), the row codec, the durability modes, group commit, and ``treemail verify``.

It imports the core only: the runtime, the daemon and the user's tools sit above it.
"""
