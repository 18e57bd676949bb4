"""Reading and validating an enrolment policy document (YAML or JSON) into rules.

Done once at start; every error names the rule and the field. The rules
themselves are castslice.settings.rules.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, BinaryIO

from castslice.settings.names import DNS_LABEL, MAX_LABEL_LENGTH, is_label_value, label_key_problem
from castslice.settings.rules import OPERATORS, NamespacePattern, Policy, Requirement, Rule

_RULE_FIELDS = ("name", "namespaces", "podSelector", "optimize", "workloadType", "slices")
_SELECTOR_FIELDS = ("matchLabels", "matchExpressions")
_EXPRESSION_FIELDS = ("key", "operator", "values")
# Long enough for a sentence, short enough for a log line and an audit annotation.
MAX_RULE_NAME_LENGTH = 63
# A ConfigMap holds at most 1 MiB; a policy larger than that is a mistake.
MAX_POLICY_BYTES = 1024 * 1024
# What a namespace glob may contain: the characters of a name, and the shell's wildcards.
_GLOB_CHARACTERS = re.compile(r"[-a-z0-9*?\[\]!]+")


class PolicyError(ValueError):
    """The policy cannot be used; the message names the rule and the field."""


def load_policy(
    text: str, presets: Mapping[str, int], max_slice_ratio: int, *, origin: str = "policy"
) -> Policy | None:
    """Parse and validate a policy document (YAML or JSON); None when it has no rules.

    `origin` prefixes every error message (the variable or file it came from).
    """
    try:
        document = _load_document(text)
        policy = _parse_policy(document, presets, max_slice_ratio)
    except PolicyError as error:
        raise PolicyError(f"{origin}: {error}") from None
    if policy is None:
        return None
    compact = json.dumps(document, separators=(",", ":"), ensure_ascii=True)
    return Policy(policy.rules, compact)


def read_policy_file(path: str, stream: BinaryIO | None = None) -> str:
    """The text of a policy file (or of `stream`, read once, named `path`); PolicyError
    names the path when it cannot be read."""
    try:
        if stream is not None:
            data = stream.read(MAX_POLICY_BYTES + 1)
        else:
            with open(path, "rb") as opened:
                data = opened.read(MAX_POLICY_BYTES + 1)
    except OSError as error:
        raise PolicyError(f"cannot read {path}: {error.strerror or error}") from None
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{path} is larger than {MAX_POLICY_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"{path} is not UTF-8 text") from None


def _load_document(text: str) -> Any:
    """The parsed document, as YAML or JSON (JSON first when it looks like JSON)."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except ValueError:
            pass  # YAML flow style also starts with "{"; let YAML say what is wrong
    # Imported here, not at the top: without a policy (the common case) every cold start
    # would still pay for loading PyYAML.
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        # Only the position: the document itself is never echoed.
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PolicyError(f"not valid YAML or JSON: {error.problem}{where}") from None
    except yaml.YAMLError as error:
        raise PolicyError(f"not valid YAML or JSON: {type(error).__name__}") from None


def _parse_policy(document: Any, presets: Mapping[str, int], max_ratio: int) -> Policy | None:
    if not isinstance(document, dict):
        raise PolicyError("must be a mapping with a list of rules, as in `rules: [...]`")
    _no_unknown_fields(document, ("rules",), "")
    if "rules" not in document:
        raise PolicyError("rules: required (write `rules: []` for none)")
    rules = document["rules"]
    if not isinstance(rules, list):
        raise PolicyError(f"rules: must be a list, got {_describe_value(rules)}")
    parsed: list[Rule] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(rules, start=1):
        rule = _parse_rule(index, entry, presets, max_ratio)
        if rule.name in seen:
            raise PolicyError(
                f"rule {index} ({_show(rule.name)}): name: also the name of rule {seen[rule.name]}"
            )
        seen[rule.name] = index
        parsed.append(rule)
    return Policy(tuple(parsed)) if parsed else None


def _parse_rule(index: int, entry: Any, presets: Mapping[str, int], max_ratio: int) -> Rule:
    label = f"rule {index}"
    if not isinstance(entry, dict):
        raise PolicyError(f"{label}: must be a mapping, got {_describe_value(entry)}")
    name = entry.get("name")
    if isinstance(name, str) and name.strip():
        label = f"rule {index} ({_show(name)})"
    try:
        return _rule_fields(entry, presets, max_ratio)
    except PolicyError as error:
        raise PolicyError(f"{label}: {error}") from None


def _rule_fields(entry: dict[str, Any], presets: Mapping[str, int], max_ratio: int) -> Rule:
    _no_unknown_fields(entry, _RULE_FIELDS, "")
    name = _rule_name(entry.get("name"))
    if "optimize" not in entry:
        raise PolicyError("optimize: required (true enrols the matching Pods, false excludes them)")
    optimize = entry["optimize"]
    if not isinstance(optimize, bool):
        raise PolicyError(f"optimize: must be true or false, got {_describe_value(optimize)}")

    workload_type, slices, rule_slices = _slice_fields(entry, presets, max_ratio)
    if not optimize and rule_slices is not None:
        field = "workloadType" if workload_type is not None else "slices"
        raise PolicyError(f"{field}: only a rule with optimize: true slices Pods")
    return Rule(
        name=name,
        namespaces=_namespaces(entry["namespaces"]) if "namespaces" in entry else None,
        selector=_selector(entry["podSelector"]) if "podSelector" in entry else None,
        optimize=optimize,
        workload_type=workload_type,
        slices=slices,
        rule_slices=rule_slices,
    )


def _rule_name(name: Any) -> str:
    if name is None:
        raise PolicyError("name: required")
    if not isinstance(name, str):
        raise PolicyError(f"name: must be a string, got {_describe_value(name)}")
    if not name.strip():
        raise PolicyError("name: must not be empty")
    if len(name) > MAX_RULE_NAME_LENGTH:
        raise PolicyError(f"name: must be at most {MAX_RULE_NAME_LENGTH} characters")
    if not name.isprintable():
        raise PolicyError("name: must be printable, on one line")
    return name


def _slice_fields(
    entry: dict[str, Any], presets: Mapping[str, int], max_ratio: int
) -> tuple[str | None, int | None, int | None]:
    if "workloadType" in entry and "slices" in entry:
        raise PolicyError("workloadType and slices: give one of them, not both")
    if "workloadType" in entry:
        workload_type = entry["workloadType"]
        if not isinstance(workload_type, str) or workload_type not in presets:
            known = ", ".join(presets) if presets else "none are configured"
            raise PolicyError(
                f"workloadType: {_describe_value(workload_type)} is not a configured "
                f"workload type ({known})"
            )
        return workload_type, None, presets[workload_type]
    if "slices" in entry:
        slices = entry["slices"]
        # bool is an int in Python; `slices: true` is a mistake, not 1.
        if isinstance(slices, bool) or not isinstance(slices, int) or not 1 <= slices <= max_ratio:
            raise PolicyError(
                f"slices: must be a whole number from 1 to {max_ratio}, "
                f"got {_describe_value(slices)}"
            )
        return None, slices, slices
    return None, None, None


def _namespaces(value: Any) -> tuple[NamespacePattern, ...]:
    if not isinstance(value, list):
        raise PolicyError(
            f'namespaces: must be a list of names or globs, as in [research, "team-*"], '
            f"got {_describe_value(value)}"
        )
    if not value:
        raise PolicyError("namespaces: an empty list matches no namespace; leave it out for all")
    patterns = []
    for index, item in enumerate(value):
        try:
            patterns.append(namespace_pattern(item))
        except PolicyError as error:
            raise PolicyError(f"namespaces[{index}]: {error}") from None
    return tuple(patterns)


def namespace_pattern(item: Any) -> NamespacePattern:
    """A namespace name or glob, validated so that it can match some namespace."""
    if not isinstance(item, str):
        raise PolicyError(f"{_describe_value(item)} is not a string; quote it")
    if not item or not _GLOB_CHARACTERS.fullmatch(item):
        raise PolicyError(
            f"{_show(item)} can never match a namespace: names have lowercase letters, "
            "digits and '-'; globs add *, ? and [...]"
        )
    if not any(char in item for char in "*?["):
        if len(item) > MAX_LABEL_LENGTH or not DNS_LABEL.fullmatch(item):
            raise PolicyError(f"{_show(item)} is not a namespace name")
        return NamespacePattern(item, None)
    return NamespacePattern(item, glob_regex(item))


def glob_regex(pattern: str) -> str:
    """The anchored regular expression of a shell-style glob, for Python's re and RE2 alike.

    `*` any run of characters, `?` one character, `[abc]`/`[a-c]` one of a set,
    `[!abc]` one not in it (fnmatch's rules). Only called on validated patterns.
    """
    parts = ["^"]
    index = 0
    while index < len(pattern):
        char = pattern[index]
        index += 1
        if char == "*":
            parts.append(".*")
        elif char == "?":
            parts.append(".")
        elif char == "[":
            start = index + 1 if pattern[index : index + 1] == "!" else index
            # fnmatch: a "]" right after "[" or "[!" belongs to the set; names have none.
            end = pattern.find("]", start)
            if end == -1:
                raise PolicyError(f"{_show(pattern)} has a '[' without its ']'")
            parts.append(_set_regex(pattern, pattern[index:end]))
            index = end + 1
        elif char in "]!":
            raise PolicyError(f"{_show(pattern)} has a stray {char!r}")
        else:
            parts.append(re.escape(char))
    parts.append("$")
    return "".join(parts)


def _set_regex(pattern: str, members: str) -> str:
    """`[...]` of a glob (without its brackets) as a regular expression character class."""
    negated = members.startswith("!")
    members = members[1:] if negated else members
    if not members or any(char in members for char in "![]*?"):
        raise PolicyError(f"{_show(pattern)} has an invalid set [{members}]")
    items: list[str] = []
    index = 0
    while index < len(members):
        if index + 2 < len(members) and members[index + 1] == "-":
            low, high = members[index], members[index + 2]
            if low > high:
                raise PolicyError(f"{_show(pattern)} has a reversed range {low}-{high}")
            items.append(f"{re.escape(low)}-{re.escape(high)}")
            index += 3
            if index < len(members) - 1 and members[index] == "-":
                raise PolicyError(f"{_show(pattern)} has a range followed by '-' in [{members}]")
        else:
            # A "-" first or last is itself; escaped, it means the same in re and RE2.
            items.append(re.escape(members[index]))
            index += 1
    return ("[^" if negated else "[") + "".join(items) + "]"


def _selector(value: Any) -> tuple[Requirement, ...] | None:
    if not isinstance(value, dict):
        raise PolicyError(
            f"podSelector: must be a label selector (matchLabels, matchExpressions), "
            f"got {_describe_value(value)}"
        )
    _no_unknown_fields(value, _SELECTOR_FIELDS, "podSelector.")
    terms: list[Requirement] = []
    match_labels = value.get("matchLabels")
    if match_labels is not None:
        if not isinstance(match_labels, dict):
            raise PolicyError(
                f"podSelector.matchLabels: must be a mapping of label keys to values, "
                f"got {_describe_value(match_labels)}"
            )
        for key, label_value in match_labels.items():
            where = f"podSelector.matchLabels.{key}"
            _label_key(key, where)
            _label_value(label_value, where)
            terms.append(Requirement(key, "In", (label_value,)))
    expressions = value.get("matchExpressions")
    if expressions is not None:
        if not isinstance(expressions, list):
            raise PolicyError(
                f"podSelector.matchExpressions: must be a list, got {_describe_value(expressions)}"
            )
        for index, expression in enumerate(expressions):
            terms.append(_requirement(expression, f"podSelector.matchExpressions[{index}]"))
    return tuple(terms) or None


def _requirement(expression: Any, where: str) -> Requirement:
    if not isinstance(expression, dict):
        raise PolicyError(
            f"{where}: must be a mapping with key, operator and values, "
            f"got {_describe_value(expression)}"
        )
    _no_unknown_fields(expression, _EXPRESSION_FIELDS, f"{where}.")
    if "key" not in expression:
        raise PolicyError(f"{where}.key: required")
    key = expression["key"]
    _label_key(key, f"{where}.key")
    operator = expression.get("operator")
    if operator is None:
        raise PolicyError(f"{where}.operator: required (one of {', '.join(OPERATORS)})")
    if operator not in OPERATORS:
        raise PolicyError(
            f"{where}.operator: {_describe_value(operator)} is not one of {', '.join(OPERATORS)}"
        )
    values = expression.get("values")
    if operator in ("In", "NotIn"):
        if not values:
            raise PolicyError(f"{where}.values: required and non-empty for operator {operator}")
        if not isinstance(values, list):
            raise PolicyError(f"{where}.values: must be a list, got {_describe_value(values)}")
        for index, item in enumerate(values):
            _label_value(item, f"{where}.values[{index}]")
        return Requirement(key, operator, tuple(dict.fromkeys(values)))
    if values:
        raise PolicyError(f"{where}.values: must be empty for operator {operator}")
    return Requirement(key, operator)


def _label_key(key: Any, where: str) -> None:
    if not isinstance(key, str):
        raise PolicyError(f"{where}: the label key {_describe_value(key)} is not a string")
    problem = label_key_problem(key)
    if problem:
        raise PolicyError(f"{where}: {_show(key)} is not a valid label key: {problem}")


def _label_value(value: Any, where: str) -> None:
    if not isinstance(value, str):
        # YAML reads `true`, `2` or `no` as other types; the label value is their text.
        raise PolicyError(f"{where}: {_describe_value(value)} is not a string; quote it")
    if not is_label_value(value):
        raise PolicyError(
            f"{where}: {_show(value)} is not a valid label value: at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit"
        )


def _no_unknown_fields(mapping: dict[Any, Any], known: Sequence[str], prefix: str) -> None:
    for key in mapping:
        if key not in known:
            raise PolicyError(
                f"{prefix}{key}: unknown field (known: {', '.join(known)})"
                if isinstance(key, str)
                else f"{prefix}{_describe_value(key)}: unknown field"
            )


def _show(text: str, limit: int = 40) -> str:
    shown = json.dumps(text, ensure_ascii=True)
    return shown if len(shown) <= limit else shown[: limit - 4] + '..."'


def _describe_value(value: Any) -> str:
    if isinstance(value, str):
        return _show(value)
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)
    if isinstance(value, list):
        return "a list"
    return "a mapping" if isinstance(value, dict) else f"a {type(value).__name__}"
