"""YAML config text parsed within bounds, so that a few hundred bytes cannot hang a command.

``yaml.safe_load`` never runs code, but it still lets tiny input ask for unbounded work: aliases
build a graph that OmegaConf later copies value by value, so nine levels of nine aliases (the
"billion laughs", 600 bytes) expand to 9**9 values and the merge never ends; and thousands of nested
brackets overflow the composer's recursion. Here the text is composed with ``yaml.SafeLoader``'s
rules while counting, and refused (one ``ConfigError`` naming where it came from) when it is too big,
too deep, expands past a bounded number of values, or refers to itself.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, SequenceNode

from nmt.errors import ConfigError

FILE_BYTES = 1 << 20  # a --config file
VALUE_BYTES = 64 << 10  # one key=value override or flag value
MAX_DEPTH = 64  # nested mappings/lists (a config needs a handful)
MAX_VALUES = 100_000  # values once every alias is expanded (what OmegaConf will copy)


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that counts nesting depth and the expanded size of every node as it composes."""

    def __init__(self, text: str, where: str):
        super().__init__(text)
        self.where = where
        self.depth = 0
        self.sizes: dict[int, int] = {}  # id(node) -> values under it, aliases expanded

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            target = self.anchors.get(self.peek_event().anchor)
            if target is not None and id(target) not in self.sizes:  # its node is still being composed
                raise ConfigError(f"{self.where}: a YAML alias refers to a value that contains it; "
                                  "a config cannot be recursive")
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ConfigError(f"{self.where}: YAML nested more than {MAX_DEPTH} levels deep; "
                              "a config needs only a few levels")
        try:
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if self._expanded_size(node) > MAX_VALUES:
            raise ConfigError(f"{self.where}: YAML aliases expand to more than {MAX_VALUES:,} values "
                              "(an alias bomb?); write the values out instead of repeating aliases")
        return node

    def _expanded_size(self, node: Node) -> int:
        """1 + the sizes of its children; every child went through compose_node, so it is known."""
        if id(node) not in self.sizes:
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            else:
                children = []
            self.sizes[id(node)] = 1 + sum(self.sizes[id(child)] for child in children)
        return self.sizes[id(node)]


def shortened(text: str, limit: int = 60) -> str:
    """``text`` on one line and at most ``limit`` characters, for quoting a value (an override) in an error."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_yaml(text: str, where: str, max_bytes: int = FILE_BYTES) -> Any:
    """``text`` as ``yaml.safe_load`` reads it, within the bounds above.

    ``where`` names the source in the error (``--config FILE``, ``override "k=v"`` with the value
    :func:`shortened`, a flag). Past a bound: ``ConfigError``. Text that is not YAML: ``yaml.YAMLError``,
    as from ``safe_load``, so callers keep their own fallback (an override that is not YAML is a string)."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > max_bytes:
        raise ConfigError(f"{where}: {size:,} bytes of YAML, more than the {max_bytes:,} allowed; "
                          "a config is a few kilobytes")
    loader = _BoundedLoader(text, where)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
