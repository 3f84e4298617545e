"""Reading what a user gives the command line: state files and Kubernetes manifests.

Each problem becomes a ``BadInput`` line naming the file (and field), never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from adapter.errors import validation_lines
from adapter.strict_yaml import StrictLoader
from solver.model import ClusterState


class BadInput(Exception):
    """Input the user must fix; each line is printed to stderr as is."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


def parse_state(text: str, source: str) -> ClusterState:
    """A ``ClusterState`` from JSON text; ``BadInput`` naming every bad field otherwise."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadInput(
            [f"{source}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}"]
        ) from None
    except RecursionError:
        raise BadInput([f"{source}: nested too deeply to be a state file"]) from None
    try:
        return ClusterState.model_validate_json(text)
    except ValidationError as e:
        raise BadInput(validation_lines(source, e, raw)) from None


def read_state(path: Path) -> ClusterState:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput([f"{path}: no such file"]) from None
    except IsADirectoryError:
        raise BadInput([f"{path}: is a directory, not a state JSON file"]) from None
    except UnicodeDecodeError as e:
        raise BadInput([f"{path}: not UTF-8 text ({e.reason} at byte {e.start})"]) from None
    except OSError as e:
        raise BadInput([f"{path}: cannot read: {e.strerror or e}"]) from None
    return parse_state(text, str(path))


STDIN = Path("-")


def read_objects(path: Path) -> list[Any]:
    """Every object of a YAML or JSON file (``-``: standard input, as `kubectl get -o yaml
    | gangsat solve --manifests -`): documents, and the items of any `List`. Items of a
    typed list as the API serves it (`NodeList`, `PodList`: items carry no kind of their
    own) take their kind and apiVersion from it."""
    try:
        if path == STDIN:
            if sys.stdin is None:
                raise OSError("standard input is closed")
            # Bytes, decoded as a file is: the locale's decoding let undecodable bytes
            # through, and the YAML parser then failed with a traceback.
            text = sys.stdin.buffer.read().decode("utf-8")
        else:
            text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput([f"{path}: no such file"]) from None
    except (OSError, UnicodeDecodeError, AttributeError) as e:
        raise BadInput([f"{path}: cannot read: {e}"]) from None
    try:
        documents = list(yaml.load_all(text.removeprefix("\ufeff"), Loader=StrictLoader))
    except yaml.YAMLError as e:
        raise BadInput([f"{path}: not YAML or JSON: {e}"]) from None
    objects: list[Any] = []
    for doc in documents:
        if isinstance(doc, dict) and isinstance(doc.get("items"), list):
            objects += _typed(doc)
        elif isinstance(doc, list):
            objects += doc
        elif doc is not None:
            objects.append(doc)
    return objects


def _typed(listed: dict[str, Any]) -> list[Any]:
    """A list's items, each with the kind and apiVersion its `XList` names where it has
    none."""
    kind = listed.get("kind")
    if not (isinstance(kind, str) and kind.endswith("List") and kind != "List"):
        return list(listed["items"])
    item_kind, version = kind.removesuffix("List"), listed.get("apiVersion")
    return [
        {"kind": item_kind, **({"apiVersion": version} if version else {}), **item}
        if isinstance(item, dict)
        else item
        for item in listed["items"]
    ]
