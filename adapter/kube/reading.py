"""Reading objects into snapshot values, each once per change: what cannot be used
becomes a ``Finding`` (reported, never fatal), and what was read is kept in a ``Memo``
for the next snapshot (``adapter.kube.convert``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from adapter.errors import validation_lines
from adapter.kube.fields import BadObject, Obj
from adapter.kube.memo import Memo, Seen, memo_key


class Finding(BaseModel):
    """An object gangsat could not use, and why: reported, never fatal."""

    model_config = ConfigDict(frozen=True)

    kind: str
    name: str
    message: str
    # The Event's reason: a spec gangsat cannot use, or a pod that waits for something
    # to change (its volumes) as kube-scheduler reports one it cannot place.
    reason: str = "InvalidSpec"
    # A pod that waits, or one refused: its gang (none for a pod of no group), whose
    # status then says why that member is not scheduled too.
    gang: str | None = None

    def __str__(self) -> str:
        return f"{self.kind} {self.name}: {self.message}"


MISSING = object()  # ``Reading.recall``'s answer for an object not seen as it is


class Reading:
    """One snapshot's reads: its findings, and its memo for the next (``memo``, kept by
    the caller from one snapshot to the next; None: nothing kept).

    ``priority_key`` is what every read depends on besides the object itself (the
    PriorityClasses and the scheduler names): a value read under another is read again.
    """

    def __init__(self, memo: Memo | None, findings: list[Finding]) -> None:
        self.memo = memo
        self.findings = findings
        self.fresh = Memo()
        self.seen = memo.by_id if memo is not None else {}
        self._by_key: dict[tuple[Any, ...], Seen] | None = None  # ``_keyed``
        self._priority_key: tuple[Any, ...] = ()

    @property
    def priority_key(self) -> tuple[Any, ...]:
        return self._priority_key

    @priority_key.setter
    def priority_key(self, key: tuple[Any, ...]) -> None:
        # The last snapshot's own object where equal: ``recalled`` compares by identity.
        last = self.memo.priority_key if self.memo is not None else None
        self._priority_key = last if key == last else key

    def seen_before(self, o: Obj) -> Seen | None:
        """What a snapshot before kept of ``o`` if it is the very object read then (for
        ``recall``), else None."""
        hit = self.seen.get(id(o))
        return hit if hit is not None and hit[0] is o else None

    def recall(self, o: Obj) -> Any:
        """What ``o`` converted to last time if it is the very object seen then, as read
        with the same priorities and scheduler names; else MISSING."""
        return self.recalled(o, self.seen_before(o))

    def recalled(self, o: Obj, hit: Seen | None) -> Any:
        """``recall`` of ``o`` from its ``seen_before``, where the caller has it already:
        one lookup per object of a big cluster, not two."""
        if hit is None:
            return MISSING
        read_under, now = hit[1][-1], self._priority_key
        if read_under is not now and read_under != now:
            return MISSING
        self.fresh.by_id[id(o)] = hit
        value, finding = hit[2], hit[3]
        if finding is not None:
            self.findings.append(finding)
        return value

    def attempt(self, kind: str, o: Obj, build: Callable[..., Any], recalled: bool = False) -> Any:
        """``build()``'s value for ``o`` (None, with a finding, where it fails), or what
        it gave for the same object or an unchanged copy of it last time. ``recalled``:
        the caller's ``recall`` of ``o`` found nothing already."""
        memo = self.memo
        if memo is None:
            return self._build(kind, o, build)
        if not recalled and (value := self.recall(o)) is not MISSING:
            return value
        read_key = memo_key(kind, o, self.priority_key)
        if read_key is None:
            return self._build(kind, o, build)
        if (hit := self._keyed().get(read_key)) is not None:
            _, _, value, finding = hit
            if finding is not None:
                self.findings.append(finding)
        else:
            before = len(self.findings)
            value = self._build(kind, o, build)
            finding = self.findings[before] if len(self.findings) > before else None
        self.fresh.by_id[id(o)] = (o, read_key, value, finding)
        return value

    def _keyed(self) -> dict[tuple[Any, ...], Seen]:
        """The last snapshot's entries by ``memo_key``, made at the first object of this
        one not found by identity: a table kept at every snapshot cost an insert per
        object of a big cluster, most of them never looked up by key."""
        if self._by_key is None:
            self._by_key = {entry[1]: entry for entry in self.seen.values()}
        return self._by_key

    def _build(self, kind: str, o: Obj, build: Callable[..., Any]) -> Any:
        try:
            return build()
        except BadObject as e:
            self.findings.append(Finding(kind=kind, name=_label(o), message=str(e)))
        except ValidationError as e:
            label = _label(o)
            lines = validation_lines(label, e, None)
            self.findings.append(Finding(kind=kind, name=label, message="; ".join(lines)))
        except (KeyError, TypeError, AttributeError) as e:
            self.findings.append(Finding(kind=kind, name=_label(o), message=f"malformed: {e!r}"))
        return None

    def kept(self) -> None:
        """This snapshot's reads kept for the next, in place of the last one's."""
        if self.memo is not None:
            fresh = self.fresh
            self.memo.by_id, self.memo.shapes = fresh.by_id, fresh.shapes
            self.memo.priority_key = self._priority_key


def _label(o: Obj) -> str:
    """How a finding names an object: built only for one that failed."""
    metadata = o.get("metadata") or {}
    if metadata.get("namespace"):
        return f"{metadata.get('namespace')}/{metadata.get('name')}"
    return str(metadata.get("name"))
