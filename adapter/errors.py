"""Bad input told to the user: one line per bad field, naming it as the file does.

Every file gangsat reads (a state, a scenario, a settings file) is a pydantic model; this
turns a ``ValidationError`` into lines such as ``state.json: nodes["gpu-3"].allocatable:
resource 'cpu' is negative (-1)``, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError


def field_path(loc: tuple[int | str, ...], raw: Any, error_type: str) -> str:
    """``('nodes', 2, 'allocatable')`` -> ``nodes["node-2"].allocatable``.

    A list index is shown as the element's ``name`` when it has one, else as the index.
    Components that are not in the input (pydantic's tags for union members) are dropped,
    except a missing field's own name.
    """
    out = ""
    at: Any = raw
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(part, int) and isinstance(at, list) and 0 <= part < len(at):
            at = at[part]
            name = at.get("name") if isinstance(at, dict) else None
            out += f"[{json.dumps(name)}]" if isinstance(name, str) and name else f"[{part}]"
        elif isinstance(part, str) and isinstance(at, dict) and part in at:
            at = at[part]
            out += f".{part}" if out else part
        elif isinstance(part, str) and last and error_type == "missing":
            out += f".{part}" if out else part
        elif isinstance(part, int):
            out += f"[{part}]"
            at = None
        # else: a union-member tag such as 'literal['']' — not a place in the file
    return out


def message(error: Mapping[str, object]) -> str:
    return str(error["msg"]).removeprefix("Value error, ")


def validation_lines(source: str, error: ValidationError, raw: Any) -> list[str]:
    """One ``source: path: message`` line per bad field, in pydantic's order.

    A value that fails every member of a union gets one line, its messages joined by "or".
    """
    by_path: dict[str, list[str]] = {}
    for e in error.errors(include_url=False):
        path = field_path(tuple(e["loc"]), raw, e["type"])
        messages = by_path.setdefault(path, [])
        if message(e) not in messages:
            messages.append(message(e))
    return [
        f"{source}: {path}: {'; or '.join(messages)}"
        if path
        else f"{source}: {'; '.join(messages)}"
        for path, messages in by_path.items()
    ]
