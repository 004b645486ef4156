"""One device's shuffle on every rank: same math across world sizes, with shuffling on.

A user's ``RandomSampler`` draws its seed from the default generator at each epoch's ``iter()``.
Lightning replaces it on several ranks with ``DistributedSampler(seed)``, whose order depends on
(seed, epoch): 2 ranks x 16 then see other global batches than 1 device x 32. ``SharedShuffle``
draws the seed exactly where and as ``RandomSampler`` does (one draw, at the same point of the
stream), takes rank 0's draw on every rank (so ranks whose streams differ still agree), and yields
the permutation that ``RandomSampler`` would have yielded with it. Split across ranks
(``DistributedSamplerWrapper``: rank r takes items r, r+W, ...), each global batch holds the
samples of one device's batch, and the default generator's stream is one device's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized

import torch
from torch.utils.data import RandomSampler, Sampler

Agree = Callable[[int], int]  # every rank gets rank 0's value


class SharedShuffle(Sampler[int]):
    """The order ``RandomSampler(data_source)`` yields on one device, the same on every rank."""

    def __init__(self, data_source: Sized, agree: Agree | None = None) -> None:
        self.data_source, self.agree = data_source, agree

    def __iter__(self) -> Iterator[int]:
        seed = int(torch.empty((), dtype=torch.int64).random_().item())  # RandomSampler's draw
        if self.agree is not None:
            seed = self.agree(seed)
        return iter(RandomSampler(self.data_source, generator=torch.Generator().manual_seed(seed)))

    def __len__(self) -> int:
        return len(self.data_source)
