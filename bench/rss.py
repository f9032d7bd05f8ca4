"""Peak RSS of one piece of work, in its own process so earlier lines do not count.

``python -m bench.rss pending PATH N``: a fresh store, N sends left pending.
``python -m bench.rss after PATH N``: an existing store (a long history), N more sends.
Prints the peak resident set in KiB last.
"""

from __future__ import annotations

import sys
from pathlib import Path

from bench.rigs import Pair, open_store, peak_rss_kib


def main() -> None:
    mode, path, count = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    store = open_store(path, sync=False)
    if mode == "pending":
        Pair(store).send_many(count)
    else:
        # A new pair in the old store (ids past the old ones): the history stays where it is.
        pair = Pair(store, first_id=10**9)
        for n in range(count):
            pair.send()
            if n % 16 == 15:
                pair.deliver()
    store.close()
    print(peak_rss_kib())


if __name__ == "__main__":
    main()
