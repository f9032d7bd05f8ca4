"""The user's wing: the ``treemail`` command line (``cli``) and its daemon subcommands
(``commands``), rich console output, transcript rows (one model for live and replay), the
TUI, and the two demos.

It sits on top: it may import the daemon, the runtime, the store and the core; none of them
imports it.
"""
