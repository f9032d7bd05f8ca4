"""(k): the sequential durable send on the PostgreSQL store against the same send on the
embedded LMDB store, measured side by side in rounds so that a noisy neighbour hits both.

The server is a throwaway one started for the run (``treemail.testing.postgres``) with its
flushes on (``fsync``, ``synchronous_commit``), on a Unix socket of the same machine: the
line shows what a round trip per statement and the server's own commit cost a send, not a
network. Without the server's binaries or psycopg, the line is left out and says why.
"""

from __future__ import annotations

from pathlib import Path

from bench.lines import Line, Scale
from bench.rigs import Pair, durable_postgres, latencies, open_store, quantile

__all__ = ["postgres_lines"]


def postgres_lines(root: Path, scale: Scale) -> list[Line]:
    from treemail import open_store as open_url

    with durable_postgres("k") as server:
        if server is None:
            return []
        lmdb = Pair(open_store(root / "j-lmdb", sync=True))
        pg = Pair(open_url(server.url(), sync=True))
        ours: list[float] = []
        base: list[float] = []
        for _ in range(max(scale.sequential // 50, 2)):
            ours += latencies(pg.send, 50)
            pg.deliver()
            base += latencies(lmdb.send, 50)
            lmdb.deliver()
        pg.store.close()
        lmdb.store.close()
    # The keys stay j_p50 and j_p99, as results.json has always had them.
    return [Line(f"j_{name}", f"(k) sequential durable send, PostgreSQL, {name}",
                 quantile(ours, q) * 1e6, quantile(base, q) * 1e6, "µs",
                 "the same send on LMDB (fsync)", "-", None)
            for q, name in ((0.5, "p50"), (0.99, "p99"))]
