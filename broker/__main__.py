"""``python -m broker``: the ``kbroker`` command (``cli.main``), kept under this name because
operators' scripts and the launcher start brokers with ``python -m broker serve``."""

from cli.main import main

raise SystemExit(main())
