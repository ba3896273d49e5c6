"""``python -m cli``: the ``kbroker`` command."""

from cli.entry import main

raise SystemExit(main())
