"""What gangsat has written, so that a status, condition or nomination that says the
same is not written again every cycle (tens of thousands of running gangs).

Each write is remembered under a memory key (``podgroup <ns/name>``, ``pod <ns/name>``,
``nominated <ns/name>``, ``queue <group> <name>``) with the signature of what it said,
from when it is queued. A write that fails, or that the writer drops unsent (the lease
lapsed), is forgotten at the next report (``redo_failed``), so that report writes it
again; before, a dropped one stayed remembered, and a Volcano PodGroup's Inqueue was
never sent. Of PodGroups, the last status the server took is kept apart (``landed``):
a status is built on its phase where the PodGroup watch lags (``Reporter._as_written``),
whatever was queued or failed since. The memory follows the live cluster: what is gone
is forgotten (``keep``), and so is what was written of a PodGroup deleted and made again
under its name.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client.exceptions import ApiException

from adapter.kube.cache import Obj
from adapter.kube.fields import uid_of
from adapter.kube.writer import Writer

log = logging.getLogger(__name__)

Signature = tuple[Any, ...]


class Written:
    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.sigs: dict[str, Signature] = {}  # memory key -> what was written
        # Written off the loop: the writer's thread reports failures here, the loop's
        # thread, which owns ``sigs``, forgets them.
        self._failed: queue.SimpleQueue[tuple[str, Signature]] = queue.SimpleQueue()
        # A PodGroup's status the server answered for, with the UID it was written to:
        # what the server holds, whatever failed since (``phase``), until the cache shows
        # it (``settled``).
        self._landed: queue.SimpleQueue[tuple[str, Signature, str]] = queue.SimpleQueue()
        self.landed: dict[str, tuple[Signature, str]] = {}
        self._podgroup_uids: dict[str, str] = {}  # as the last report saw them

    def __len__(self) -> int:
        return len(self.sigs)

    def get(self, memory: str) -> Signature | None:
        return self.sigs.get(memory)

    def submit(
        self, memory: str, sig: Signature, key: str, write: Callable[[], Any], uid: str = ""
    ) -> None:
        """Send ``write`` off the loop; remember ``sig`` as written under ``memory`` until
        the write fails (then the next report writes it again). ``uid``: a PodGroup's,
        whose status the server's answer then says it holds."""
        self.sigs[memory] = sig

        def tracked() -> None:
            try:
                write()
                if uid:
                    self._landed.put((memory, sig, uid))
            except ApiException as e:
                if e.status == 404:
                    # Deleted since the cycle (under churn, a finished job every second):
                    # nothing to write again, and the next prune forgets it.
                    log.debug("not written, %s is gone", memory)
                    return
                self.failed(memory, sig)
                raise
            except Exception:
                self.failed(memory, sig)
                raise

        self.writer.submit(key, tracked, dropped=lambda: self.failed(memory, sig))

    def remember(self, memory: str, sig: Signature) -> None:
        """Remember ``sig`` as written, unwritten: what the server was found to hold."""
        self.sigs[memory] = sig

    def failed(self, memory: str, sig: Signature) -> None:
        """``sig`` was not written after all (any thread)."""
        self._failed.put((memory, sig))

    def any_failed(self) -> bool:
        return not self._failed.empty()

    def redo_failed(self) -> None:
        """Forget what failed, unless written again since; learn what landed."""
        while not self._failed.empty():
            memory, sig = self._failed.get()
            if self.sigs.get(memory) == sig:
                del self.sigs[memory]
        while not self._landed.empty():
            memory, sig, uid = self._landed.get()
            self.landed[memory] = (sig, uid)

    def phase(self, gang: str, uid: str) -> Any:
        """The phase of the last status the server took for the PodGroup of ``uid``, if
        any (a status's signature leads with it; Inqueue's is the phase alone). Not
        merely the last one queued: that one may fail, and the one before it stands. An
        answer that came for a PodGroup deleted since is not its namesake's."""
        landed = self.landed.get(f"podgroup {gang}")
        return landed[0][0] if landed and landed[1] == uid else None

    def settled(self, gang: str) -> None:
        """The cache shows the PodGroup as written, or moved on: what landed no longer
        stands over it (a Pending someone writes later is theirs to write)."""
        self.landed.pop(f"podgroup {gang}", None)

    def forget_recreated(self, podgroups: Mapping[str, tuple[Any, Obj]]) -> None:
        """What was written of a PodGroup deleted and made again under its name (a
        training operator names it after its job) is not the new one's: remembered, its
        status was taken for written, and its Inqueue built on."""
        uids = {key: uid_of(obj) for key, (_, obj) in podgroups.items()}
        for key, uid in uids.items():
            if self._podgroup_uids.get(key, uid) != uid:
                self.sigs.pop(f"podgroup {key}", None)
        self._podgroup_uids = uids

    def keep(self, exists: Callable[[str], bool]) -> None:
        """Forget what was written of objects that are gone."""
        self.sigs = {key: sig for key, sig in self.sigs.items() if exists(key)}
        self.keep_landed(exists)

    def keep_landed(self, exists: Callable[[str], bool]) -> None:
        """``keep``, of the statuses the server took only."""
        self.landed = {key: sig for key, sig in self.landed.items() if exists(key)}
