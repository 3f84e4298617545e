"""YAML as gangsat reads users' files (manifests, the settings file): safe, fast where
libyaml is there, and strict about keys named twice."""

from __future__ import annotations

from typing import Any

import yaml

# libyaml's loader parses a 1,000-node manifest about 5x faster than the pure-Python one;
# both are safe loaders and build the same objects.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class StrictLoader(SAFE_LOADER):  # type: ignore[valid-type,misc]
    """A mapping that names one key twice is refused, as kubectl refuses it (its YAML is
    decoded strictly: "key ... already set in map"); read last-wins, a manifest's second
    ``resources:`` of a container silently replaced the first, and gangsat decided on a
    pod the API server would never have taken. Keys a merge (``<<``) brings in may be
    overridden, as YAML allows."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping",
                        node.start_mark,
                        f"key {key_node.value!r} appears twice",
                        key_node.start_mark,
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep)
