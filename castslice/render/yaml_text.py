"""YAML as kubectl writes it: what every generated manifest is printed with."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    # The checker needs a class to derive from; CSafeDumper offers the same methods.
    _SafeDumper = yaml.SafeDumper
else:
    _SafeDumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class _Dumper(_SafeDumper):
    """Block style, keys in the manifest's order, multi-line strings (scripts) as `|` blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        # Each object written out in full, as kubectl shows it, never as `&id001` / `*id001`.
        return True


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_text)


def dump_yaml(content: Any) -> str:
    """`content` as one YAML document, in the order its keys were read."""
    return yaml.dump(
        content,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 16,
    )
