"""``python -m controller -c controller.properties [--override key=value ...]``: run a controller."""

from controller.server import main

raise SystemExit(main())
