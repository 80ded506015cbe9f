"""A power cut, simulated below SQLite: a VFS that remembers what each file held at its last fsync.

Every write goes to the real file as usual, and is also kept aside until SQLite syncs that file.
`write_durable(folder)` writes out what a machine would find after losing power at that instant:
each file as of its last sync, every later write gone (the harshest outcome a disk may give).
Opening that copy with a normal Store is the reboot.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import apsw

_names = itertools.count()


@dataclass
class FileImage:
    durable: bytearray = field(default_factory=bytearray)
    unsynced: list[tuple[str, int, bytes]] = field(default_factory=list)
    syncs: int = 0

    def sync(self) -> None:
        for kind, offset, data in self.unsynced:
            if kind == "write":
                end = offset + len(data)
                if len(self.durable) < end:
                    self.durable.extend(bytes(end - len(self.durable)))
                self.durable[offset:end] = data
            else:
                del self.durable[offset:]
        self.unsynced.clear()
        self.syncs += 1


class PowerCutVFS(apsw.VFS):
    """Register with a fresh name per test; pass `vfs.name` to Store.open(vfs=...)."""

    def __init__(self) -> None:
        self.name = f"powercut-{next(_names)}"
        self.files: dict[str, FileImage] = {}
        super().__init__(self.name, "")

    def xOpen(self, name: Any, flags: list[int]) -> PowerCutFile:
        return PowerCutFile(self, name, flags)

    def xDelete(self, filename: str, syncdir: bool) -> None:
        super().xDelete(filename, syncdir)
        self.files.pop(filename, None)

    def image(self, path: Path) -> FileImage:
        return self.files[str(path)]

    def write_durable(self, folder: Path) -> None:
        """What survives a power cut now: every file as of its last sync, into folder."""
        folder.mkdir(parents=True)
        for filename, image in self.files.items():
            (folder / Path(filename).name).write_bytes(bytes(image.durable))


class PowerCutFile(apsw.VFSFile):
    def __init__(self, vfs: PowerCutVFS, name: Any, flags: list[int]) -> None:
        super().__init__("", name, flags)
        filename = name.filename() if isinstance(name, apsw.URIFilename) else name
        # Temporary files (no name) cannot outlive a power cut: nothing to keep for them.
        self.image = vfs.files.setdefault(filename, FileImage()) if filename else None

    def xWrite(self, data: bytes, offset: int) -> None:
        super().xWrite(data, offset)
        if self.image is not None:
            self.image.unsynced.append(("write", offset, bytes(data)))

    def xTruncate(self, newsize: int) -> None:
        super().xTruncate(newsize)
        if self.image is not None:
            self.image.unsynced.append(("truncate", newsize, b""))

    def xSync(self, flags: int) -> None:
        super().xSync(flags)
        if self.image is not None:
            self.image.sync()
