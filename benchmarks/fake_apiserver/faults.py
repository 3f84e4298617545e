"""Fault injection for tests: requests that fail, history compacted away, watches
dropped."""

from __future__ import annotations

import re
from dataclasses import dataclass

from benchmarks.fake_apiserver.objects import FakeApiError
from benchmarks.fake_apiserver.storage import _Store
from benchmarks.fake_apiserver.watch import _shutdown


@dataclass
class _Failure:
    method: str
    path: re.Pattern[str]
    code: int
    times: int
    reason: str | None


class _Faults(_Store):
    """Injected faults; ``fail()`` failures wait in ``_failures`` for their requests."""

    _failures: list[_Failure]

    def fail(
        self, method: str, path_regex: str, code: int, times: int = 1, reason: str | None = None
    ) -> None:
        """The next ``times`` requests whose method (or ``*``) matches and whose path
        (without query) contains a match of ``path_regex`` (``re.search``) get this error."""
        with self._lock:
            self._failures.append(
                _Failure(method.upper(), re.compile(path_regex), code, times, reason)
            )

    def clear_faults(self) -> None:
        """Every injected failure not yet used is dropped."""
        with self._lock:
            self._failures.clear()

    def expire_history(self) -> None:
        """Compact: every watch or continue token from before now gets 410 Expired."""
        with self._lock:
            for key, events in self._history.items():
                events.clear()
                self._floor[key] = self._rv
            self._snapshots.clear()

    def drop_watches(self) -> None:
        with self._lock:
            watchers = [w for ws in self._watchers.values() for w in ws]
            for ws in self._watchers.values():
                ws.clear()
        for watcher in watchers:
            watcher.queue.put(None)
            if watcher.conn is not None:
                _shutdown(watcher.conn)

    def _injected(self, method: str, path: str) -> FakeApiError | None:
        with self._lock:
            for failure in self._failures:
                if failure.method in ("*", method) and failure.path.search(path):
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                    headers = [("Retry-After", "1")] if failure.code == 429 else []
                    return FakeApiError(
                        failure.code,
                        f"injected failure for {method} {path}",
                        reason=failure.reason,
                        headers=headers,
                    )
        return None
