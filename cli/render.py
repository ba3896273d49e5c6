"""Rich output shared by the commands: the stderr console, the partitions table, a file's
progress bar. Data goes to stdout; progress, summaries and errors go to stderr."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cli.common import error_name

stderr = Console(stderr=True)


def partitions_table(topics) -> Table:
    """One row per partition of ``topics`` (``TopicMetadata``), and one per topic that has an
    error: leader ("none" when the partition is offline), leader epoch, replicas, ISR, the
    replicas whose broker is down, and the partition's error."""
    table = Table("topic", "partition", "leader", "epoch", "replicas", "isr", "offline", "error")
    for topic in topics:
        if topic.error_code:
            table.add_row(topic.name, "", "", "", "", "", "", error_name(topic.error_code))
        for p in sorted(topic.partitions.values(), key=lambda p: p.partition):
            table.add_row(topic.name, str(p.partition), str(p.leader) if p.leader >= 0 else "none",
                          str(p.leader_epoch), ",".join(map(str, p.replicas)), ",".join(map(str, p.isr)),
                          ",".join(map(str, p.offline_replicas)), error_name(p.error_code) if p.error_code else "")
    return table


class FileProgress:
    """A rich progress bar over a file's bytes, with the records produced and their rate."""

    def __init__(self, size: int) -> None:
        self.records = 0
        self._progress = Progress(
            TextColumn("producing"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[rate]}"), console=stderr)
        self._task = self._progress.add_task("produce", total=size, rate="")

    def advance(self, nbytes: int) -> None:
        elapsed = self._progress.tasks[0].elapsed or 0
        rate = f"{self.records:,} records, {self.records / elapsed:,.0f}/s" if elapsed else ""
        self._progress.update(self._task, advance=nbytes, rate=rate)

    def __enter__(self) -> "FileProgress":
        self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._progress.stop()
