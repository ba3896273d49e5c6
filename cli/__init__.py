"""``kbroker``, the command line: one module per command group, dispatched by ``cli.main``.

The client commands (topics, produce, consume, metadata) are Kafka clients: they use
``protocol.client`` and rich, never broker/, storage/ or controller/. ``dump-log`` reads
segment files through ``storage.dump``; ``serve`` is the only command that imports broker/.
"""
