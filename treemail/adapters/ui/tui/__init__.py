"""``treemail tui``: a Textual app watching a daemon's sessions converse, or replaying a store."""
