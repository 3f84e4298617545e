"""The patch types a client may send: JSON merge patch (RFC 7386), strategic merge patch
(the part of it a scheduler's writes meet) and JSON patch (RFC 6902)."""

from __future__ import annotations

from typing import Any

from benchmarks.fake_apiserver.objects import _clone

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

# Strategic merge patch merges these lists element by element on the key; every other
# list is replaced, as for a merge patch. The subset of Kubernetes' patchMergeKey tags
# that a scheduler's writes meet.
SMP_MERGE_KEYS = {
    "conditions": "type",
    "addresses": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
}
SMP_UNION_LISTS = frozenset({"finalizers"})  # patchStrategy "merge" on a list of strings


def _merge_patch(target: Any, patch: Any) -> Any:
    # RFC 7386, without mutating target: unchanged subtrees are shared, which is safe
    # because stored objects are never mutated in place.
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge_patch(result.get(key), value)
    return result


def _strategic_merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):  # $setElementOrder/..., $retainKeys, $deleteFromPrimitiveList
            continue
        if value is None:
            result.pop(key, None)
        elif key in SMP_MERGE_KEYS and isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, SMP_MERGE_KEYS[key])
        elif key in SMP_UNION_LISTS and isinstance(value, list):
            current = list(result.get(key) or [])
            result[key] = current + [v for v in value if v not in current]
        else:
            result[key] = _strategic_merge_patch(result.get(key), value)
    return result


def _merge_list(current: Any, items: list[Any], key: str) -> list[Any]:
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in items):
        return [
            _strategic_merge_patch({}, i)
            for i in items
            if not (isinstance(i, dict) and i.get("$patch") == "replace")
        ]
    out = list(current) if isinstance(current, list) else []
    for item in items:
        if not isinstance(item, dict) or key not in item:
            out.append(item)
            continue
        index = next(
            (n for n, el in enumerate(out) if isinstance(el, dict) and el.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del out[index]
        elif index is None:
            out.append(_strategic_merge_patch({}, item))
        else:
            out[index] = _strategic_merge_patch(out[index], item)
    return out


class _PatchError(Exception):
    pass


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _index(node: list[Any], token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(node)
    if not token.isdigit():
        raise _PatchError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(node) or (index == len(node) and not allow_end):
        raise _PatchError(f"array index {index} out of bounds")
    return index


def _walk(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, allow_end=False)]
        else:
            raise _PatchError(f"path /{'/'.join(tokens)} does not exist")
    return node


def _json_patch(doc: Any, ops: list[Any]) -> Any:
    doc = _clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise _PatchError(f"invalid operation {op!r}")
        kind, tokens = op["op"], _pointer(op["path"])
        if kind in ("move", "copy"):
            value = _clone(_walk(doc, _pointer(op.get("from", ""))))
            if kind == "move":
                doc = _json_patch_remove(doc, _pointer(op.get("from", "")))
            doc = _json_patch_add(doc, tokens, value)
        elif kind == "add":
            doc = _json_patch_add(doc, tokens, op.get("value"))
        elif kind == "remove":
            doc = _json_patch_remove(doc, tokens)
        elif kind == "replace":
            doc = _json_patch_remove(doc, tokens) if tokens else None
            doc = _json_patch_add(doc, tokens, op.get("value"))
        elif kind == "test":
            if _walk(doc, tokens) != op.get("value"):
                raise _PatchError(f"testing value {op['path']} failed")
        else:
            raise _PatchError(f"unknown operation {kind!r}")
    return doc


def _json_patch_add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, dict):
        parent[tokens[-1]] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], allow_end=True), value)
    else:
        raise _PatchError(f"cannot add at {tokens}")
    return doc


def _json_patch_remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return None
    parent = _walk(doc, tokens[:-1])
    if isinstance(parent, dict) and tokens[-1] in parent:
        del parent[tokens[-1]]
    elif isinstance(parent, list):
        del parent[_index(parent, tokens[-1], allow_end=False)]
    else:
        raise _PatchError(f"path /{'/'.join(tokens)} does not exist")
    return doc
