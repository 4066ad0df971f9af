"""An environment's own random streams, for packages that draw from the global ones.

Some environments (TextArena's games, many hand-written Gymnasium ones) seed and draw
from Python's global `random` or NumPy's global generator. Episodes stepped in lockstep
would then draw from one shared stream, and a resumed run would not replay the same
episodes. `RandomStreams` gives each episode streams of its own, seeded from its sample,
active around every call into the environment, its construction included.

How: the module-level functions of `random` (`random.random`, `random.seed`, ...) and of
`numpy.random` (`np.random.randint`, `np.random.seed`, ...) are replaced, once, by
functions that draw from the streams active in the calling thread (a context variable),
and from the process's own generators where none are. Nothing global is swapped, so a
call that hangs in one thread holds up no other episode, cannot draw from another's
streams, and the process's own streams move only by its own draws. What is not reached:
a function bound before the first use (`from random import random` at import time; the
methods written in Python, such as `randint`, are reached) and
`numpy.random.set_bit_generator`.
"""

from __future__ import annotations

import functools
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import numpy as np

_ACTIVE: ContextVar[RandomStreams | None] = ContextVar("random_streams", default=None)
_INSTALLING = threading.Lock()
_installed = False
# numpy.random's module functions that are not methods of its global RandomState, and the
# method each stands for
_NUMPY_FUNCTIONS = {"seed": "seed", "ranf": "random_sample", "sample": "random_sample"}


class RandomStreams:
    """Python's and NumPy's global random streams as one episode sees them."""

    def __init__(self, seed: int) -> None:
        self.python = random.Random(seed)
        self.numpy = np.random.RandomState(seed)

    @contextmanager
    def active(self) -> Iterator[None]:
        """Within this block, in this thread, the global streams are the episode's; the
        block's draws carry over to the next one."""
        _install()
        token = _ACTIVE.set(self)
        try:
            yield
        finally:
            _ACTIVE.reset(token)


def _install() -> None:
    """Point the module-level random functions at the calling thread's streams (once)."""
    global _installed
    with _INSTALLING:
        if _installed:
            return
        process_python = random._inst  # type: ignore[attr-defined]  # random's own generator
        for name in dir(random):
            if getattr(getattr(random, name), "__self__", None) is process_python:
                setattr(random, name, _dispatcher(getattr(random, name), "python", name))
        process_numpy = np.random.mtrand._rand
        for name in dir(np.random):
            function = getattr(np.random, name)
            if getattr(function, "__self__", None) is process_numpy:
                setattr(np.random, name, _dispatcher(function, "numpy", name))
            elif name in _NUMPY_FUNCTIONS:
                setattr(np.random, name, _dispatcher(function, "numpy", _NUMPY_FUNCTIONS[name]))
        _installed = True


def _dispatcher(process_function: Callable[..., Any], stream: str, method: str
                ) -> Callable[..., Any]:
    """`process_function`, or the active streams' `method` of their `stream` generator."""

    @functools.wraps(process_function)
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        streams = _ACTIVE.get()
        if streams is None:
            return process_function(*args, **kwargs)
        return getattr(getattr(streams, stream), method)(*args, **kwargs)

    return dispatch
