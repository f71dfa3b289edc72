"""Reading a .zst file frame by frame, refusing one that ends inside a frame.

zstandard's stream reader returns the text decoded so far when the file is cut in the middle of a frame, as if the
file ended there: a corpus cut short (a copy interrupted, a disk that filled up) would be prepared to part of its
text with no word. Here each frame is decompressed by its own ``decompressobj`` and the end of the input is checked
to fall on a frame's end.
"""

from __future__ import annotations

import io

_READ = 1 << 17


class TruncatedFrame(EOFError):
    """The compressed input ended inside a zstd frame."""


class ZstdFrames(io.RawIOBase):
    """The decompressed bytes of every frame of ``raw`` (a binary file), in order; raises TruncatedFrame at the end
    of the input when the last frame is unfinished."""

    def __init__(self, zstandard, raw):
        self.zstandard, self.raw = zstandard, raw
        self.decompressor = None  # the frame being read; None between frames
        self.pending = b""  # decompressed bytes not yet returned
        self.done = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending and not self.done:
            self._fill()
        count = min(len(buffer), len(self.pending))
        buffer[:count] = self.pending[:count]
        self.pending = self.pending[count:]
        return count

    def _fill(self) -> None:
        data = self.raw.read(_READ)
        if not data:
            if self.decompressor is not None:
                raise TruncatedFrame("the file ends inside a zstd frame: it was cut short")
            self.done = True
            return
        out = []
        while data:
            if self.decompressor is None:
                self.decompressor = self.zstandard.ZstdDecompressor().decompressobj()
            out.append(self.decompressor.decompress(data))
            if not self.decompressor.eof:
                break
            data = self.decompressor.unused_data
            self.decompressor = None
        self.pending = b"".join(out)
