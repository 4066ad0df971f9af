"""An environment's own random streams, for packages that draw from the global ones.

Some environments (TextArena's games, many hand-written Gymnasium ones) seed and draw
from Python's global `random` or NumPy's global generator. Episodes stepped in lockstep
would then draw from one shared stream, and a resumed run would not replay the same
episodes. `RandomStreams` gives each episode streams of its own, seeded from its sample,
swapped in around every call into the environment.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

_GLOBAL_STREAMS = threading.Lock()  # one environment at a time holds the global streams


class RandomStreams:
    """Python's and NumPy's global random streams as one episode sees them."""

    def __init__(self, seed: int) -> None:
        self._python = random.Random(seed).getstate()
        self._numpy = np.random.RandomState(seed).get_state()

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within this block the process's global streams are the episode's; the block's
        draws carry over to the next one, and the process's own streams are put back."""
        with _GLOBAL_STREAMS:
            saved = random.getstate(), np.random.get_state()
            random.setstate(self._python)
            np.random.set_state(self._numpy)
            try:
                yield
            finally:
                self._python, self._numpy = random.getstate(), np.random.get_state()
                random.setstate(saved[0])
                np.random.set_state(saved[1])
