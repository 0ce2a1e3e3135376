"""float32 vectors in a file on the node's local disk, read through a memory map: the refine
vectors of `dense.index.refine.storage: disk`.

The file is unlinked from the start (it holds a view of the log, rebuilt by replay or from a
snapshot, so nothing is lost with it, and nothing is left behind by a crash). Its pages are the
kernel's page cache: a search reads the few candidates it re-scores, the pages stay cached
while memory is free, and the kernel drops them under memory pressure instead of the process
being killed; they are not index memory, and a cold candidate costs a disk read.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from pathlib import Path

import numpy as np

from ragindex.protocols import Vectors

MIN_CAPACITY = 1024  # rows the file first grows to; then it doubles
COMPACT_ROWS = 65_536  # rows moved at a time when removed ones are dropped


class MappedVectors:
    """Rows of float32 vectors addressed by position, appended at the end; removing rows moves
    every later row down (positions stay dense, as a FAISS flat index's do)."""

    def __init__(self, dim: int, directory: Path | None = None) -> None:
        self.dim = dim
        self.ntotal = 0
        self._row_bytes = dim * 4
        if directory is not None:
            directory.mkdir(parents=True, exist_ok=True)
        # open for the store's lifetime (closed when it is collected)
        self._file = tempfile.TemporaryFile(dir=directory, prefix="ragindex-refine-")  # noqa: SIM115
        self._capacity = 0
        self._rows: np.ndarray = np.empty((0, dim), dtype=np.float32)

    @property
    def disk_bytes(self) -> int:
        """Bytes of the file the rows take (the file itself may be larger: room to grow)."""
        return self.ntotal * self._row_bytes

    def _grow_to(self, rows: int) -> None:
        if rows <= self._capacity:
            return
        capacity = max(MIN_CAPACITY, self._capacity)
        while capacity < rows:
            capacity *= 2
        os.ftruncate(self._file.fileno(), capacity * self._row_bytes)
        # A new map; the old one is unmapped once no array taken from it is left.
        mapped = mmap.mmap(self._file.fileno(), capacity * self._row_bytes)
        self._rows = np.frombuffer(mapped, dtype=np.float32).reshape(capacity, self.dim)
        self._capacity = capacity

    def add(self, vectors: Vectors) -> None:
        """Append rows (n x dim float32)."""
        vecs = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self.dim)
        self._grow_to(self.ntotal + len(vecs))
        self._rows[self.ntotal : self.ntotal + len(vecs)] = vecs
        self.ntotal += len(vecs)

    def reconstruct_batch(self, positions: np.ndarray) -> Vectors:
        """The rows at `positions` (a copy)."""
        if len(positions) and (positions.min() < 0 or positions.max() >= self.ntotal):
            raise IndexError(f"row positions outside 0..{self.ntotal - 1}")
        return self._rows[positions]

    def remove(self, positions: np.ndarray) -> None:
        """Drop the rows at `positions`; later rows move down, in order. One pass, a block at
        a time: a kept row only ever moves to a lower position, and each block is gathered
        before it is written, so no row is overwritten before it is moved."""
        keep = np.ones(self.ntotal, dtype=bool)
        keep[positions] = False
        kept = np.flatnonzero(keep)
        for start in range(0, len(kept), COMPACT_ROWS):
            block = kept[start : start + COMPACT_ROWS]
            if block[0] != start or block[-1] != start + len(block) - 1:  # else already there
                self._rows[start : start + len(block)] = self._rows[block]
        self.ntotal = len(kept)

    def to_bytes(self) -> bytes:
        return self._rows[: self.ntotal].tobytes()

    @classmethod
    def from_bytes(cls, data: bytes, dim: int, directory: Path | None = None) -> MappedVectors:
        if len(data) % (dim * 4):
            raise ValueError(f"{len(data)} bytes are not whole {dim}-d float32 rows")
        rows = cls(dim, directory)
        rows.add(np.frombuffer(data, dtype=np.float32).reshape(-1, dim))
        return rows
