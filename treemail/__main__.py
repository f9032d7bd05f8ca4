from treemail.adapters.cli import main

raise SystemExit(main())
