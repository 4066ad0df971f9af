"""Sandbox throughput: start latency and tool calls per second, against plain processes.

Start latency (median and 99th percentile over --samples starts): a cold bubblewrap
sandbox (`backend.open()`: bwrap, namespaces, the supervisor's first answer), one taken
from a warm pool (`pool.acquire()` once the pool has filled), and the baseline, a plain
`python3 -c pass` subprocess run to its end.

Tool calls per second at --concurrency threads, each with its own sandbox, for --seconds:
the `python` tool (a persistent interpreter's call) and the `bash` tool under bubblewrap;
the same `python` tool over the unsafe_process backend (the same supervisor, no
namespaces: what isolation costs); and the baseline, a plain `python3 -c CODE`
subprocess per call.

python bench/sandbox_throughput.py [--samples 20] [--concurrency 8] [--seconds 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from src.sandboxes.backends import open_backend  # noqa: E402
from src.sandboxes.pool import SandboxPool  # noqa: E402
from src.sandboxes.settings import SandboxSettings  # noqa: E402
from src.sandboxes.tools import BashTool, PythonTool  # noqa: E402

CODE = "x = sum(range(100))\nprint(x)"


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def latency_line(name: str, seconds: list[float]) -> str:
    return (f"{name:<34} median {1000 * statistics.median(seconds):7.1f} ms   "
            f"p99 {1000 * percentile(seconds, 0.99):7.1f} ms   (n={len(seconds)})")


def timed(action: Callable[[], object], samples: int) -> list[float]:
    seconds = []
    for _ in range(samples):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return seconds


def calls_per_second(make_call: Callable[[], Callable[[], object]], concurrency: int,
                     duration_s: float) -> float:
    """Calls completed per second by `concurrency` threads, each calling its own callable
    (made before the clock starts) for `duration_s`."""
    calls = [make_call() for _ in range(concurrency)]
    counts = [0] * concurrency
    start_line = threading.Barrier(concurrency + 1)
    stop = threading.Event()

    def worker(index: int) -> None:
        start_line.wait()
        while not stop.is_set():
            calls[index]()
            counts[index] += 1

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(concurrency)]
    for thread in threads:
        thread.start()
    start_line.wait()
    start = time.perf_counter()
    time.sleep(duration_s)
    stop.set()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5.0)
    options = parser.parse_args()
    settings = SandboxSettings()
    backend = open_backend(settings)
    unsafe = open_backend(settings.model_copy(update={"backend": "unsafe_process"}))

    print(latency_line("plain subprocess (python3 -c pass)",
                       timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
                             options.samples)))
    print(latency_line("cold bubblewrap sandbox", timed(lambda: backend.open().close(),
                                                         options.samples)))
    with SandboxPool(backend, size=options.samples,
                     parallelism=settings.open_parallelism) as pool:
        time.sleep(0.5 * options.samples)  # let the pool fill
        taken: list = []
        seconds = timed(lambda: taken.append(pool.acquire()), options.samples)
        for sandbox in taken:
            sandbox.close()
    print(latency_line("warm pool (acquire)", seconds))

    opened: list = []

    def tool(kind: type, source: object, arguments: dict) -> Callable[[], Callable[[], object]]:
        def make() -> Callable[[], object]:
            sandbox = source.open()
            opened.append(sandbox)
            instance = kind(sandbox)
            instance.call(arguments)  # the interpreter started before the clock
            return lambda: instance.call(arguments)
        return make

    def plain() -> Callable[[], object]:
        return lambda: subprocess.run([sys.executable, "-c", CODE], capture_output=True,
                                      check=True)

    rows = [("python tool, bubblewrap", tool(PythonTool, backend, {"code": CODE})),
            ("bash tool, bubblewrap", tool(BashTool, backend, {"command": "echo $((6 * 7))"})),
            ("python tool, unsafe_process", tool(PythonTool, unsafe, {"code": CODE})),
            ("plain subprocess (python3 -c)", plain)]
    try:
        for name, make in rows:
            rate = calls_per_second(make, options.concurrency, options.seconds)
            print(f"{name:<34} {rate:8.1f} calls/s at concurrency {options.concurrency}")
    finally:
        for sandbox in opened:
            sandbox.close()


if __name__ == "__main__":
    main()
