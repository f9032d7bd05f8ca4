from treemail.adapters.ui.cli import main

raise SystemExit(main())
