"""What treemail gives those who test a store or an embedding: ``StoreContract``, the suite
every Store backend passes (subclass it with pytest), and ``PostgresCluster``, a throwaway
PostgreSQL server for a test session.

Importing this package needs pytest, which the ``dev`` extra installs; the library itself
never imports it.
"""

from treemail.testing.store_contract import StoreContract

__all__ = ["StoreContract"]
