"""math-verify on untrusted answers, bounded in time, callable from any process or thread.

math-verify enforces its own timeouts with SIGALRM, which works only in a process's main
thread (not in thread pools or Ray actors), and sympy can compute for ever on a reply such
as `\\boxed{9^{9^{9}}}`. So the check is a bounded call (src/sandboxes/bounded_call.py): it
runs in a worker process that is killed and replaced when it overruns; the answer then
counts as wrong.
"""

from __future__ import annotations

import logging

from math_verify import parse, verify

from src.sandboxes.bounded_call import (
    SCORER_TIMEOUT_S,
    BoundedFunction,
    BoundExceeded,
    ScorerUnavailable,
)

logger = logging.getLogger(__name__)
# its timeouts are off (they run in our worker's main thread but we bound the whole call);
# the library warns on every call that they are
logging.getLogger("math_verify").setLevel(logging.ERROR)

VERIFY_TIMEOUT_S = SCORER_TIMEOUT_S


def verify_boxed(gold: str, boxed: str) -> bool:
    """Whether the boxed answer equals the gold one. Gold goes first: verify is not
    symmetric. Unbounded: call it through `verify_bounded`."""
    gold_parsed = parse(f"${gold}$", parsing_timeout=None)
    predicted = parse(f"$\\boxed{{{boxed}}}$", parsing_timeout=None)
    if not gold_parsed or not predicted:
        return False
    return bool(verify(gold_parsed, predicted, timeout_seconds=None))


# math-verify's first call sets itself up (seconds on a loaded machine): done when it is
# loaded into a worker, so that the first answer's bound measures the check alone
_VERIFY = BoundedFunction(verify_boxed, warm_up=("1", "1"))


def start_verifier() -> None:
    """Start the worker process now, with math-verify loaded (and in every worker that
    replaces it), so that no answer checked is charged with it."""
    _VERIFY.start()


def verify_bounded(gold: str, boxed: str, timeout_s: float = VERIFY_TIMEOUT_S) -> bool:
    """`verify_boxed` in the worker process: False when it takes longer than `timeout_s`
    (the worker is then replaced). Safe from any thread and any process."""
    try:
        return bool(_VERIFY(gold, boxed, timeout_s=timeout_s))
    except BoundExceeded as overrun:
        logger.warning("math-verify on the answer %.80r: %s; counted as wrong", boxed, overrun)
        return False
    except ScorerUnavailable:  # the host's failure, raised as it is
        raise
    except Exception as error:
        raise RuntimeError(f"math-verify failed on the answer {boxed!r} (gold {gold!r}): "
                           f"{type(error).__name__}: {error}") from error
