"""The seeded orders examples are read in: a well-spread seed from (run seed, position, stream), and one seeded
permutation of the examples per epoch. The loader (data/batching/loader.py) reads training batches in them, and a
blend (data/layouts/blend.py) orders each source's examples with them."""

from __future__ import annotations

import numpy as np

MASK64 = (1 << 64) - 1


def mix_seed(seed: int, position: int, stream: int = 0) -> int:
    """A well-spread 63-bit seed from (run seed, stream position, stream id): SplitMix64 finalizer."""
    z = (seed * 0x9E3779B97F4A7C15 + position * 0xBF58476D1CE4E5B9 + stream * 0x94D049BB133111EB) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return (z ^ (z >> 31)) >> 1


class EpochPermutations:
    """Example index at stream position p: permutation number p // n, entry p % n."""

    def __init__(self, num_examples: int, seed: int, shuffle: bool = True):
        self.n, self.seed, self.shuffle = num_examples, seed, shuffle
        self._epoch, self._perm = -1, np.arange(0)

    def __call__(self, position: int) -> int:
        epoch, offset = divmod(position, self.n)
        if not self.shuffle:
            return offset
        if epoch != self._epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._epoch = epoch
        return int(self._perm[offset])
