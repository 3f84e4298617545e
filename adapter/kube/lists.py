"""A list response's items, as the cache keeps them, and its metadata.

orjson decodes a document through an intermediate tree many times the size of its text:
a first list of 20,000 pods as kube-apiserver sends them (124 MB of JSON) peaked at
2.1 GB while being decoded, to 0.66 GB of objects, before any was trimmed (``kept``).
The first list is one response (``resourceVersion=0`` is served whole from the watch
cache), so a cluster of 50,000 such pods put a scheduler limited to 2 GiB past its limit
at every start. A large body is therefore decoded item by item (ijson, yajl's C
parser), each trimmed as it comes: the same 20,000 pods peaked at 0.3 GB of objects
(0.59 GB RSS, against 1.28 GB), in 2.0 s instead of orjson's 0.9 s. Small bodies (pages
of a paged list, small clusters) keep orjson's speed.
"""

from __future__ import annotations

import io
import logging
from typing import Any

import ijson

from adapter.kube.kept import Obj, kept
from adapter.kube.resources import Resource, decode

log = logging.getLogger(__name__)

# Bodies this large are decoded item by item: about 5,000 pods as a real server sends
# them, 50,000 of the fake server's (orjson's peak then stays near 0.5 GB).
STREAM_ABOVE = 32 * 2**20


def list_page(resource: Resource, data: bytes) -> tuple[list[Obj], dict[str, Any]]:
    """The items of one list response, each as the cache keeps it, and its metadata."""
    if len(data) >= STREAM_ABOVE:
        try:
            # The server writes the metadata first: this stops at its end.
            meta = next(ijson.items(io.BytesIO(data), "metadata"), None)
            items = ijson.items(io.BytesIO(data), "items.item", use_float=True)
            return [kept(resource, o) for o in items], meta if isinstance(meta, dict) else {}
        except ijson.JSONError as e:  # what yajl refuses (a NaN), orjson or json may read
            log.debug("%s: list decoded whole: %s", resource, e)
    page = decode(data)
    items = page.get("items") or []
    return [kept(resource, o) for o in items], page.get("metadata") or {}
