"""``python -m broker``: the ``kbroker`` command."""

from broker.cli import main

raise SystemExit(main())
