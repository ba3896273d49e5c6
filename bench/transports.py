"""A transport that drops what is written, for benches that feed a broker's KafkaConnection in
process: the request path timed without a socket (produce_path_bench.py, metrics_bench.py)."""

from __future__ import annotations


class NullTransport:
    """Drops what is written; reading is never paused (flow control calls are no-ops)."""

    def write(self, data) -> None:
        pass

    def writelines(self, chunks) -> None:
        pass

    def get_extra_info(self, name, default=None):
        return default

    def is_reading(self) -> bool:
        return True

    def set_write_buffer_limits(self, high=None, low=None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass
