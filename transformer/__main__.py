from transformer.cli import main

raise SystemExit(main())
