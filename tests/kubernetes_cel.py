"""Admission policies evaluated in process, as the API server evaluates them: cel-python (celpy)
with the parts of Kubernetes' CEL environment it lacks.

celpy implements the CEL language and its standard functions. The API server's
environment (k8s.io/apiserver/pkg/cel/environment/base.go) adds cel-go extensions
and Kubernetes libraries; the policies use some of them, and each is written here
with exactly the semantics of the source named beside it:

- optional types (cel-go `cel.OptionalTypes`, common/types/optional.go and
  checker/../parser): `a.?f`, `a[?k]`, `.hasValue()`, `.value()`, `.orValue(d)`;
- string extensions (cel-go ext/strings.go): `charAt`, `indexOf`, `substring`,
  `join`, `replace`, and `format` with the one verb the policies use, `%x`;
- list extensions (cel-go ext/lists.go): `lists.range`, `sort`, `flatten`;
- the two-variable comprehension `transformList` (cel-go ext/comprehensions.go);
- Kubernetes' quantity library (k8s.io/apiserver/pkg/cel/library/quantity.go):
  `isQuantity`, `quantity`, `sign`, parsing as resource.ParseQuantity
  (k8s.io/apimachinery/pkg/api/resource/quantity.go, suffix.go);
- Kubernetes' regex library (library/regex.go): `findAll`;
- mutating policies' JSON Patch (library/jsonpatch.go, pkg/cel/mutation):
  `JSONPatch{op, path, value}` and `jsonpatch.escapeKey`.

Anything else the policies might come to use fails loudly (an undeclared function
is an evaluation error here, as a compile error there), so the comparison never
passes on a feature this module does not implement. `int(string)` and `has()`
are replaced by Kubernetes' (Go's) stricter forms. The real API server evaluates
the same policies in tests/e2e (tests/e2e/celeval.py and test_policy_mode.py).
"""

from __future__ import annotations

import functools
import json
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, cast

import celpy
import lark
import re2
from celpy import celtypes
from celpy.celparser import CELParser
from celpy.evaluation import Activation, CELEvalError, Evaluator, base_functions

from tests.policy_comparison import PolicyRun

_CELPY_GRAMMAR = (Path(celpy.__file__).parent / "cel.lark").read_text()
_MEMBER_RULE = (
    "member         : member_dot | member_dot_arg | member_index | member_object | primary\n"
)
if _MEMBER_RULE not in _CELPY_GRAMMAR:  # pragma: no cover - a celpy upgrade changed its grammar
    raise ImportError("celpy's grammar changed: update tests/kubernetes_cel.py")
# Optional field selection and indexing (cel-go parser/gen/CEL.g4: `member '.?' IDENT` and
# `member '[?' expr ']'`), beside celpy's own member rules.
_GRAMMAR = _CELPY_GRAMMAR.replace(
    _MEMBER_RULE,
    "member         : member_dot | member_dot_arg | member_index | member_object"
    " | member_dot_optional | member_index_optional | primary\n"
    'member_dot_optional : member "." "?" IDENT\n'
    'member_index_optional : member "[" "?" expr "]"\n',
)
_PARSER = lark.Lark(
    _GRAMMAR,
    parser="lalr",
    start="expr",
    g_regex_flags=re.M,
    lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
    propagate_positions=True,
    maybe_placeholders=False,
    priority="invert",
)
# Names that only prefix a function (`lists.range(3)`), never a variable.
_FUNCTION_NAMESPACES = frozenset({"lists", "jsonpatch", "optional"})
_INT64 = range(-(2**63), 2**63)
# celpy interprets by recursion, a few frames per nesting level; the warning texts nest
# a hundred-odd levels deep.
sys.setrecursionlimit(max(sys.getrecursionlimit(), 20_000))


class CelError(AssertionError):
    """An expression failed to parse or evaluate; the message names it."""


# --- values celpy has no type for ------------------------------------------------------------


@dataclass(frozen=True)
class OptionalValue:
    """cel-go's optional value (common/types/optional.go): a value, or none."""

    present: bool
    content: Any = None


_NONE = OptionalValue(False)


class JSONPatchValue(celtypes.MapType):
    """A `JSONPatch{op, path, value}` operation of a mutating policy (pkg/cel/mutation)."""


def _json_patch(fields: celtypes.MapType | None) -> JSONPatchValue:
    allowed = {"op", "path", "from", "value"}
    given = dict(fields or {})
    unknown = set(map(str, given)) - allowed
    if unknown:
        raise TypeError(f"JSONPatch has no field {sorted(unknown)}")
    return JSONPatchValue(given)


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes quantity's exact value (a Fraction: the library compares exactly)."""

    amount: Fraction


# --- functions -------------------------------------------------------------------------------


def _strict(function: Callable[..., Any]) -> Callable[..., Any]:
    """As cel-go's strict functions: an error among the arguments is the result."""

    @functools.wraps(function)
    def wrapper(*args: Any) -> Any:
        for arg in args:
            if isinstance(arg, CELEvalError):
                return arg
        try:
            return function(*args)
        except (ValueError, IndexError, TypeError, KeyError) as error:
            return CELEvalError(f"{function.__name__}: {error}", error.__class__, error.args)

    return wrapper


def _text(value: Any) -> str:
    # celpy's `+` of two strings gives a plain str.
    if not isinstance(value, str):
        raise TypeError(f"no such overload: expected a string, got {type(value).__name__}")
    return str(value)


def _integer(value: Any) -> int:
    if isinstance(value, celtypes.BoolType) or not isinstance(value, celtypes.IntType):
        raise TypeError(f"no such overload: expected an int, got {type(value).__name__}")
    return int(value)


def char_at(text: Any, index: Any) -> celtypes.StringType:
    """ext/strings.go charAt: the code point at `index`; "" at the end; an error past it."""
    runes, at = _text(text), _integer(index)
    if at < 0 or at > len(runes):
        raise IndexError(f"index out of range: {at}")
    return celtypes.StringType(runes[at : at + 1])


def index_of(text: Any, sub: Any, offset: Any = None) -> celtypes.IntType:
    """ext/strings.go indexOf: code-point index of `sub` from `offset`, or -1."""
    runes, wanted = _text(text), _text(sub)
    start = 0 if offset is None else _integer(offset)
    if start < 0 or start > len(runes):
        raise IndexError(f"index out of range: {start}")
    return celtypes.IntType(runes.find(wanted, start))


def substring(text: Any, start: Any, end: Any = None) -> celtypes.StringType:
    """ext/strings.go substring: code points [start, end); an error out of range."""
    runes = _text(text)
    first = _integer(start)
    last = len(runes) if end is None else _integer(end)
    if first < 0 or first > len(runes):
        raise IndexError(f"index out of range: {first}")
    if last < 0 or last > len(runes):
        raise IndexError(f"index out of range: {last}")
    if first > last:
        raise IndexError(f"invalid substring range. start: {first}, end: {last}")
    return celtypes.StringType(runes[first:last])


def join(items: Any, separator: Any = None) -> celtypes.StringType:
    """ext/strings.go join: the list's strings, `separator` between them."""
    if not isinstance(items, list):
        raise TypeError("no such overload: join on a non-list")
    glue = "" if separator is None else _text(separator)
    return celtypes.StringType(glue.join(_text(item) for item in items))


def replace(text: Any, old: Any, new: Any, count: Any = None) -> celtypes.StringType:
    """ext/strings.go replace: strings.Replace, every occurrence unless `count` >= 0."""
    limit = -1 if count is None else _integer(count)
    return celtypes.StringType(_text(text).replace(_text(old), _text(new), limit))


def format_string(template: Any, args: Any) -> celtypes.StringType:
    """ext/strings.go format, for the verbs `%x` and `%%` only (the ones the policies use).

    `%x` (ext/formatting.go): a string's UTF-8 bytes or an int, in lower-case hex.
    Another verb raises, so a policy that starts using one fails here until it is added.
    """
    pattern, values = _text(template), list(args)
    out: list[str] = []
    position = 0
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char != "%":
            out.append(char)
            index += 1
            continue
        verb = pattern[index + 1 : index + 2]
        index += 2
        if verb == "%":
            out.append("%")
            continue
        if verb != "x":
            raise ValueError(f"format verb %{verb} is not implemented in tests/kubernetes_cel.py")
        if position >= len(values):
            raise IndexError(f"index {position} out of range")
        value = values[position]
        position += 1
        if isinstance(value, str):
            out.append(value.encode().hex())
        elif isinstance(value, celtypes.IntType) and not isinstance(value, celtypes.BoolType):
            out.append(format(int(value), "x"))
        else:
            raise TypeError(f"%x of a {type(value).__name__}")
    return celtypes.StringType("".join(out))


def lists_range(count: Any) -> celtypes.ListType:
    """ext/lists.go lists.range(n): [0, 1, ..., n-1]."""
    return celtypes.ListType(celtypes.IntType(i) for i in range(_integer(count)))


def sort(items: Any) -> celtypes.ListType:
    """ext/lists.go sort: elements of one orderable type, ascending (strings by code point,
    which is Go's byte order of UTF-8)."""
    values = list(items)
    kinds = {_kind(value) for value in values}
    if len(kinds) > 1:
        raise TypeError(f"sort of mixed types {sorted(kinds)}")
    return celtypes.ListType(sorted(values))


def _kind(value: Any) -> str:
    """A value's CEL type name, for the scalars sort() orders."""
    for kind in (bool, str, int, float):
        if isinstance(value, kind):
            return kind.__name__
    return type(value).__name__


def flatten(items: Any, depth: Any = None) -> celtypes.ListType:
    """ext/lists.go flatten: nested lists spliced in, `depth` levels (1 by default)."""
    levels = 1 if depth is None else _integer(depth)
    if levels < 0:
        raise ValueError("level must be non-negative")

    def spread(values: Any, level: int) -> Iterator[Any]:
        for value in values:
            if isinstance(value, list) and level > 0:
                yield from spread(value, level - 1)
            else:
                yield value

    return celtypes.ListType(spread(items, levels))


def find_all(text: Any, pattern: Any, limit: Any = None) -> celtypes.ListType:
    """library/regex.go findAll: Go's regexp FindAllString(s, n), RE2 syntax.

    Go skips an empty match right after the previous match; google-re2's finditer
    follows the same rule (both are RE2's UNANCHORED search loop).
    """
    count = -1 if limit is None else _integer(limit)
    found = [match.group(0) for match in re2.finditer(_text(pattern), _text(text))]
    if count >= 0:
        found = found[:count]
    return celtypes.ListType(celtypes.StringType(item) for item in found)


def matches(text: Any, pattern: Any) -> celtypes.BoolType:
    """CEL's matches: an RE2 search anywhere in the string (Go's regexp.MatchString)."""
    return celtypes.BoolType(re2.search(_text(pattern), _text(text)) is not None)


def escape_key(key: Any) -> celtypes.StringType:
    """library/jsonpatch.go escapeKey: `~` to `~0`, `/` to `~1` (RFC 6901)."""
    return celtypes.StringType(_text(key).replace("~", "~0").replace("/", "~1"))


_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def to_int(value: Any) -> celtypes.IntType:
    """CEL's int(): from a string as Go's strconv.ParseInt(s, 10, 64), no spaces nor `_`."""
    if isinstance(value, str):
        if not _GO_INT.fullmatch(str(value)):
            raise ValueError(f"cannot convert {str(value)!r} to int")
        number = int(str(value))
    elif isinstance(value, celtypes.DoubleType):
        if value != value or not -(2.0**63) <= float(value) < 2.0**63:
            raise ValueError("range error converting double to int")
        number = int(float(value))
    else:
        number = int(value)
    if number not in _INT64:
        raise ValueError("range error converting to int")
    return celtypes.IntType(number)


# resource.ParseQuantity's suffixes (k8s.io/apimachinery/pkg/api/resource/suffix.go).
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12}
_DECIMAL_SUFFIXES |= {"P": 15, "E": 18}
_SUFFIX_LETTERS = "eEinumkKMGTP"


def parse_quantity(text: str) -> Quantity:
    """resource.ParseQuantity's verdict and value, ported from quantity.go (parseQuantityString
    and ParseQuantity): which strings parse, and to what exact amount (the sign is all the
    policies read; ParseQuantity's rounding to nano rounds away from zero, keeping it)."""
    if text == "":
        raise ValueError("quantities must match the regular expression")
    if text == "0":
        return Quantity(Fraction(0))
    positive, value, number, fraction, suffix = _split_quantity(text)
    if suffix in _BINARY_SUFFIXES:
        base, exponent = 2, _BINARY_SUFFIXES[suffix]
    elif suffix in _DECIMAL_SUFFIXES:
        base, exponent = 10, _DECIMAL_SUFFIXES[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        exponent = int(suffix[1:])
        if exponent not in range(-(2**63), 2**63):
            raise ValueError("unable to parse quantity's suffix")
        base = 10
    else:
        raise ValueError("unable to parse quantity's suffix")
    digits = number + fraction
    if not digits.strip("0") and not value.strip("+-."):
        # ParseQuantity's fast path takes "+", "-", "." as zero (its scanner returns "0").
        return Quantity(Fraction(0))
    if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)", value):
        # The slow path's inf.Dec SetString wants digits; only reached without any.
        raise ValueError("unable to parse numeric part of quantity")
    amount = Fraction(int(digits or "0"), 10 ** len(fraction))
    amount *= Fraction(base) ** exponent
    return Quantity(amount if positive else -amount)


def _split_quantity(text: str) -> tuple[bool, str, str, str, str]:
    """quantity.go parseQuantityString: (positive, value, numerator, denominator, suffix)."""
    positive, position, end = True, 0, len(text)
    if text[:1] in "+-":
        positive = text[0] != "-"
        position = 1
    while position < end and text[position] == "0":
        position += 1
    if position >= end:
        return positive, "0", "0", "", ""
    start = position
    while position < end and text[position] in "0123456789":
        position += 1
    number = text[start:position] or "0"
    fraction = ""
    if position < end and text[position] == ".":
        position += 1
        start = position
        while position < end and text[position] in "0123456789":
            position += 1
        fraction = text[start:position]
        if position >= end:
            return positive, text, number, fraction, ""
    value = text[:position]
    suffix_start = position
    while position < end and text[position] in _SUFFIX_LETTERS:
        position += 1
    if position < end and text[position] in "+-":
        position += 1
    while position < end and text[position] in "0123456789":
        position += 1
    if position < end:
        raise ValueError("quantities must match the regular expression")
    return positive, value, number, fraction, text[suffix_start:]


def is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(_text(text))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def quantity(text: Any) -> Quantity:
    return parse_quantity(_text(text))


def sign(value: Any) -> celtypes.IntType:
    if not isinstance(value, Quantity):
        raise TypeError("no such overload: sign of a non-quantity")
    return celtypes.IntType((value.amount > 0) - (value.amount < 0))


def _optional(value: Any) -> OptionalValue:
    if not isinstance(value, OptionalValue):
        raise TypeError(f"no such overload: expected an optional, got {type(value).__name__}")
    return value


def has_value(value: Any) -> celtypes.BoolType:
    return celtypes.BoolType(_optional(value).present)


def optional_value(value: Any) -> Any:
    found = _optional(value)
    if not found.present:
        raise ValueError("optional.none() dereference")
    return found.content


def or_value(value: Any, default: Any) -> Any:
    found = _optional(value)
    return found.content if found.present else default


def optional_of(value: Any) -> OptionalValue:
    return OptionalValue(True, value)


def optional_none() -> OptionalValue:
    return _NONE


FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: _strict(function)
    for name, function in {
        "charAt": char_at,
        "indexOf": index_of,
        "substring": substring,
        "join": join,
        "replace": replace,
        "format": format_string,
        "lists.range": lists_range,
        "sort": sort,
        "flatten": flatten,
        "findAll": find_all,
        "matches": matches,
        "jsonpatch.escapeKey": escape_key,
        "int": to_int,
        "isQuantity": is_quantity,
        "quantity": quantity,
        "sign": sign,
        "hasValue": has_value,
        "value": optional_value,
        "orValue": or_value,
        "optional.of": optional_of,
        "optional.none": optional_none,
    }.items()
}


# --- the evaluator ----------------------------------------------------------------------------


# Each literal's tree (kept, so that its id is not reused) and value.
_LITERALS: dict[int, tuple[lark.Tree, Any]] = {}


class KubernetesEvaluator(Evaluator):
    """celpy's evaluator with the syntax and macros above.

    Variables live in a plain dict (`scope`) rather than in celpy's Activation, which
    it clones for every element a macro visits: same lookups, a tenth of the time.
    """

    def __init__(
        self, ast: lark.Tree, activation: Activation, scope: dict[str, Any] | None = None
    ) -> None:
        super().__init__(ast, activation)
        self.base_scope = scope or {}
        self.scope = self.base_scope

    def sub_evaluator(self, ast: lark.Tree) -> Evaluator:
        return KubernetesEvaluator(ast, self.activation, self.scope)

    def set_activation(self, values: Any) -> Evaluator:
        self.scope = {**self.base_scope, **values}
        return self

    def ident_value(self, name: str, root_scope: bool = False) -> Any:
        if name in self.scope:
            return self.scope[name]
        return super().ident_value(name, root_scope)

    def literal(self, tree: lark.Tree) -> Any:
        """A literal's value, worked out once per parse tree (celpy redoes it each visit)."""
        known = _LITERALS.get(id(tree))
        if known is not None and known[0] is tree:
            return known[1]
        value = super().literal(tree)
        _LITERALS[id(tree)] = (tree, value)
        return value

    def member_dot_optional(self, tree: lark.Tree) -> Any:
        """`a.?f`: optional.of(a.f) when the map `a` has `f`, else optional.none()."""
        member_tree, name = tree.children
        member = self.visit(member_tree)
        return _select_optional(member, celtypes.StringType(cast(lark.Token, name).value))

    def member_index_optional(self, tree: lark.Tree) -> Any:
        """`a[?k]`: optional.of(a[k]) when the map has the key or the list the index."""
        member, index = self.visit_children(tree)
        return _select_optional(member, index)

    def macro_has_eval(self, exprlist: lark.Tree) -> Any:
        """has(e.f) as CEL defines it: an error when `e` fails, else whether the map has `f`.

        (celpy answers false for any failing operand, which would hide a missing guard.)
        """
        (expression,) = exprlist.children
        member_dot = _selection(expression)
        if member_dot is None:
            return CELEvalError("has() needs a field selection", TypeError, ())
        operand_tree, name = member_dot.children
        operand = self.visit(operand_tree)
        if isinstance(operand, CELEvalError):
            return operand
        if isinstance(operand, dict):
            return celtypes.BoolType(celtypes.StringType(cast(lark.Token, name).value) in operand)
        return CELEvalError(f"has() on a {type(operand).__name__}", TypeError, ())

    def member_dot_arg(self, tree: lark.Tree) -> Any:
        member_tree, method = cast(tuple[lark.Tree, lark.Token], tree.children[:2])
        namespace = _namespace(member_tree)
        if namespace is not None:
            args = self.visit(tree.children[2]) if len(tree.children) > 2 else []
            function = FUNCTIONS.get(f"{namespace}.{method.value}")
            if function is None:
                return CELEvalError(f"undeclared reference to {namespace}.{method.value}")
            return function(*args)
        if method.value == "transformList":
            return self._transform_list(tree)
        return super().member_dot_arg(tree)

    def _transform_list(self, tree: lark.Tree) -> Any:
        """ext/comprehensions.go transformList(i, v, [filter,] transform): for a list, index
        and element; for a map, key and value; a list of `transform` where `filter` holds."""
        target = self.visit(tree.children[0])
        if isinstance(target, CELEvalError):
            return target
        args = cast(lark.Tree, tree.children[2]).children
        if len(args) not in (3, 4):
            return CELEvalError("transformList takes 3 or 4 arguments", TypeError, ())
        first, second = (_identifier(arg) for arg in args[:2])
        condition = self.sub_evaluator(args[2]) if len(args) == 4 else None
        transform = self.sub_evaluator(args[-1])
        if isinstance(target, list):
            pairs: list[tuple[Any, Any]] = [
                (celtypes.IntType(index), item) for index, item in enumerate(target)
            ]
        elif isinstance(target, dict):
            pairs = list(target.items())
        else:
            return CELEvalError(f"transformList on a {type(target).__name__}", TypeError, ())
        out = []
        for key, item in pairs:
            bound = {first: key, second: item}
            if condition is not None:
                keep = _evaluate(condition, bound)
                if isinstance(keep, CELEvalError):
                    return keep
                if keep is not celtypes.BoolType(True) and keep != celtypes.BoolType(True):
                    continue
            value = _evaluate(transform, bound)
            if isinstance(value, CELEvalError):
                return value
            out.append(value)
        return celtypes.ListType(out)


def _evaluate(evaluator: Evaluator, bound: dict[str, Any]) -> Any:
    try:
        return evaluator.evaluate(bound)
    except CELEvalError as error:
        return error


def _identifier(tree: lark.Tree) -> str:
    idents = list(tree.find_data("ident"))
    if len(idents) != 1:
        raise CelError(f"a macro's variable must be a name: {tree}")
    return cast(lark.Token, idents[0].children[0]).value


def _namespace(member_tree: lark.Tree) -> str | None:
    """`lists` in `lists.range(3)`: a bare name that only prefixes functions."""
    if member_tree.data != "member" or len(member_tree.children) != 1:
        return None
    primary = member_tree.children[0]
    if not isinstance(primary, lark.Tree) or primary.data != "primary":
        return None
    ident = primary.children[0]
    if not isinstance(ident, lark.Tree) or ident.data != "ident":
        return None
    name = cast(lark.Token, ident.children[0]).value
    return name if name in _FUNCTION_NAMESPACES else None


def _selection(expression: lark.Tree) -> lark.Tree | None:
    """The `e.f` that a has() argument is (wrapped only in single-child rules), or None."""
    node: Any = expression
    while isinstance(node, lark.Tree) and node.data != "member_dot" and len(node.children) == 1:
        node = node.children[0]
    return node if isinstance(node, lark.Tree) and node.data == "member_dot" else None


def _select_optional(member: Any, key: Any) -> Any:
    if isinstance(member, CELEvalError):
        return member
    if isinstance(key, CELEvalError):
        return key
    if isinstance(member, OptionalValue):
        if not member.present:
            return _NONE
        member = member.content
    if isinstance(member, dict):
        return OptionalValue(True, member[key]) if key in member else _NONE
    if isinstance(member, list) and isinstance(key, celtypes.IntType):
        return OptionalValue(True, member[int(key)]) if 0 <= int(key) < len(member) else _NONE
    return CELEvalError(f"no such overload: optional selection on {type(member).__name__}")


# --- programs and policies --------------------------------------------------------------------


class Program:
    """One compiled expression, evaluated with the given variables."""

    def __init__(self, expression: str) -> None:
        self.expression = expression
        try:
            self.ast = _PARSER.parse(expression)
        except lark.exceptions.LarkError as error:
            raise CelError(f"parse: {error}\nin: {expression[:2000]}") from None

    def evaluate(self, variables: dict[str, Any]) -> Any:
        evaluator = KubernetesEvaluator(self.ast, _ACTIVATION)
        try:
            value = evaluator.evaluate({**variables, "JSONPatch": _json_patch})
        except CELEvalError as error:
            raise CelError(f"eval: {error}\nin: {self.expression[:2000]}") from None
        if isinstance(value, CELEvalError):
            raise CelError(f"eval: {value}\nin: {self.expression[:2000]}")
        return value


_ACTIVATION = Activation(annotations={}, functions=cast(Any, {**base_functions, **FUNCTIONS}))


@functools.lru_cache(maxsize=4096)
def compiled(expression: str) -> Program:
    return Program(expression)


def evaluate(expression: str, **variables: Any) -> Any:
    """`expression` with plain JSON `variables`; the result as plain JSON."""
    bound = {name: to_cel(value) for name, value in variables.items()}
    return to_json(compiled(expression).evaluate(bound))


def to_cel(document: Any) -> Any:
    """JSON as the API server's evaluator receives it from tests/e2e/kube/celeval: whole
    numbers as ints, any other number as its JSON text (a string)."""
    text = json.dumps(document)
    plain = json.loads(text, parse_float=str, parse_int=_whole_number)
    return celpy.json_to_cel(plain)


def _whole_number(text: str) -> int | str:
    number = int(text)
    return number if number in _INT64 else text


def to_json(value: Any) -> Any:
    """A CEL result as JSON, as celeval's toJSON shows it."""
    if value is None:
        return None
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, str):
        return str(value)
    # celpy's `+` of two lists gives a plain list.
    if isinstance(value, list):
        return [to_json(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_json(item) for key, item in value.items()}
    raise CelError(f"cannot show a {type(value).__name__}")


def run_policy(
    policy: dict[str, Any],
    objects: list[dict[str, Any]],
    requests: list[dict[str, Any]] | None = None,
) -> list[PolicyRun]:
    """Run a Mutating- or ValidatingAdmissionPolicy (or a webhook's matchConditions) on each
    object as the API server does, in celeval's order: matchConditions (a false one ends
    the run), the variables in order, the JSON Patch, the validations (the message of each
    that fails) and the audit annotations (those neither null nor blank). A CEL error
    raises CelError."""
    spec = policy["spec"]
    return [
        _run_one(spec, obj, (requests or [])[index] if index < len(requests or []) else {})
        for index, obj in enumerate(objects)
    ]


def _run_one(spec: dict[str, Any], obj: dict[str, Any], request: dict[str, Any]) -> PolicyRun:
    values = celtypes.MapType()
    bound = {"object": to_cel(obj), "request": to_cel(request), "variables": values}
    for condition in spec.get("matchConditions", []):
        if compiled(condition["expression"]).evaluate(bound) != celtypes.BoolType(True):
            return PolicyRun(matched=False)
    shown: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        value = compiled(variable["expression"]).evaluate(bound)
        values[celtypes.StringType(variable["name"])] = value
        shown[variable["name"]] = to_json(value)
    patch = None
    for mutation in spec.get("mutations", []):
        patch = to_json(compiled(mutation["jsonPatch"]["expression"]).evaluate(bound))
    messages = []
    for validation in spec.get("validations", []):
        if compiled(validation["expression"]).evaluate(bound) == celtypes.BoolType(True):
            continue
        messages.append(to_json(compiled(validation["messageExpression"]).evaluate(bound)))
    audit: dict[str, str] = {}
    for annotation in spec.get("auditAnnotations", []):
        value = to_json(compiled(annotation["valueExpression"]).evaluate(bound))
        if value is not None and (not isinstance(value, str) or value.strip()):
            audit[annotation["key"]] = value
    return PolicyRun(True, shown, patch=patch, messages=messages or None, audit=audit or None)
