"""``python -m cli``: the ``kbroker`` command."""

from cli.main import main

raise SystemExit(main())
