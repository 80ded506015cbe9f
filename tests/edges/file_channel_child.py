"""Run by test_file_channel_crash: dispatch one batch to a file channel, announce the write, then wait
to be killed before the Store records the send."""

from __future__ import annotations

import sys

from console.core import Batch, Store
from console.edges.channels import FileChannel
from tests.support import send_due


class AnnounceThenWait:
    def __init__(self, inner: FileChannel) -> None:
        self.inner = inner
        self.name = inner.name
        self.at_most_once = inner.at_most_once

    def send(self, batch: Batch) -> None:
        self.inner.send(batch)
        print(f"written {batch.key}", flush=True)
        sys.stdin.read()  # blocks until the parent kills this process


def main(db: str, path: str, now: int) -> None:
    store = Store.open(db)
    store.queue_message("the only copy", now=now)
    send_due(store, [AnnounceThenWait(FileChannel(path))], now=now)
    print("dispatch returned", flush=True)  # never reached: the parent kills us first


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
