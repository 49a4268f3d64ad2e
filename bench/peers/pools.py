"""Process-pool peers: multiprocessing.Pool, concurrent.futures.ProcessPoolExecutor, pebble, loky.

Each class keeps a 1-worker pool (warm latency, the 10 MiB result) and a
2-worker pool (throughput), created once and warmed up before any timing.
None of these can stop a task that is already running (pebble can, by
killing its worker, but its future reports ``cancelled`` at once, before the
worker is gone, so there is no comparable cancel-to-result figure).
"""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import Future
from typing import Any

from bench._stats import now_us
from bench.peers._work import BIG_BYTES, big, echo


class _Pool:
    loop = "sync"

    def _new(self, workers: int) -> Any:
        raise NotImplementedError

    def _submit(self, pool: Any, fn: Any, *args: Any) -> Any:
        """Submit, and return something whose ``_get(handle)`` waits for the value."""
        raise NotImplementedError

    @staticmethod
    def _get(handle: Any) -> Any:
        return handle.result()

    def __enter__(self) -> _Pool:
        self.one = self._new(1)
        self.two = self._new(2)
        for pool in (self.one, self.two):
            for handle in [self._submit(pool, echo, i) for i in range(50)]:
                self._get(handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for pool in (self.one, self.two):
            self._shutdown(pool)

    def _shutdown(self, pool: Any) -> None:
        pool.shutdown(wait=True)

    def _call(self, fn: Any, *args: Any) -> Any:
        return self._get(self._submit(self.one, fn, *args))

    def op_warm(self, n: int) -> list[float]:
        for i in range(200):
            self._call(echo, i)
        samples = []
        for i in range(n):
            start = now_us()
            self._call(echo, i)
            samples.append(now_us() - start)
        return samples

    def op_throughput(self, n: int) -> float:
        start = time.perf_counter()
        for handle in [self._submit(self.two, echo, i) for i in range(n)]:
            self._get(handle)
        return time.perf_counter() - start

    def op_big(self, reps: int) -> list[float]:
        samples = []
        for i in range(reps + 1):
            start = time.perf_counter()
            if len(self._call(big)) != BIG_BYTES:
                raise AssertionError("short big result")
            if i:
                samples.append((time.perf_counter() - start) * 1e3)
        return samples


class MpPool(_Pool):
    """multiprocessing.Pool (the default start method, fork here): apply / apply_async."""

    def _new(self, workers: int) -> Any:
        return multiprocessing.get_context().Pool(workers)

    def _submit(self, pool: Any, fn: Any, *args: Any) -> Any:
        return pool.apply_async(fn, args)

    @staticmethod
    def _get(handle: Any) -> Any:
        return handle.get()

    def _call(self, fn: Any, *args: Any) -> Any:
        return self.one.apply(fn, args)  # the blocking form the target names

    def _shutdown(self, pool: Any) -> None:
        pool.close()
        pool.join()


class Executor(_Pool):
    """concurrent.futures.ProcessPoolExecutor: submit().result()."""

    def _new(self, workers: int) -> Any:
        from concurrent.futures import ProcessPoolExecutor

        return ProcessPoolExecutor(workers)

    def _submit(self, pool: Any, fn: Any, *args: Any) -> Future[Any]:
        return pool.submit(fn, *args)  # type: ignore[no-any-return]


class Pebble(_Pool):
    """pebble.ProcessPool: schedule().result()."""

    def _new(self, workers: int) -> Any:
        import pebble

        return pebble.ProcessPool(max_workers=workers)

    def _submit(self, pool: Any, fn: Any, *args: Any) -> Any:
        return pool.schedule(fn, args=args)

    def _shutdown(self, pool: Any) -> None:
        pool.close()
        pool.join()


class Loky(_Pool):
    """loky.ProcessPoolExecutor (loky's own start method): submit().result()."""

    def _new(self, workers: int) -> Any:
        import loky

        return loky.ProcessPoolExecutor(max_workers=workers)

    def _submit(self, pool: Any, fn: Any, *args: Any) -> Any:
        return pool.submit(fn, *args)
