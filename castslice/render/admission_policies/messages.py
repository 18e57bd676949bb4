"""CEL that writes the webhook's warnings, character for character.

Mirrors castslice.decision.slices (`shorten`, `clip`, the invalid-annotation warnings)
and castslice.decision.admission (placed by hand, less than asked).
"""

from __future__ import annotations

from castslice.contract.definitions import SLICE_RATIO, WORKLOAD_TYPE
from castslice.decision.slices import MAX_WARNING_LENGTH, known_types
from castslice.decision.slices import shorten as shorten_text
from castslice.render import cel
from castslice.render.admission_policies.placement import PlacementCel
from castslice.render.cel import Expr, literal, string, variable
from castslice.settings.config import Config
from castslice.settings.rules import POLICY_SOURCE_PREFIX

# slices.shorten keeps at most this many characters of a rendered value.
_SHORT = 20
_HEX = "0123456789abcdef"


# Python's escapes for the characters repr() writes specially, as CEL string literals.
_BACKSLASH, _QUOTE, _APOSTROPHE = "\\", '"', "'"
_RENDERED = {
    _BACKSLASH: _BACKSLASH * 2,
    _QUOTE: _BACKSLASH + _QUOTE,
    "\t": _BACKSLASH + "t",
    "\n": _BACKSLASH + "n",
    "\r": _BACKSLASH + "r",
}


def python_ascii_char(char: Expr, double_quoted: Expr) -> Expr:
    """CEL for one character as `ascii(value)[1:-1].replace('"', '\\\\"')` renders it.

    `double_quoted` is true when Python's repr delimits the whole value with `"`
    (it holds `'` and no `"`): `'` is then left as it is instead of escaped.
    """
    cases = [
        f"{char} == {string(plain)} ? {string(escaped)}" for plain, escaped in _RENDERED.items()
    ]
    apostrophe = cel.if_else(double_quoted, string(_APOSTROPHE), string(_BACKSLASH + _APOSTROPHE))
    cases.append(f"{char} == {string(_APOSTROPHE)} ? {apostrophe}")
    cases.append(f"({char} >= {string(' ')} && {char} <= {string('~')}) ? {char}")
    return "(" + " : ".join(cases) + f" : {code_point_escape(char)})"


def code_point_escape(char: Expr) -> Expr:
    r"""CEL for `\xhh`, `\uhhhh` or `\Uhhhhhhhh` of one character, as Python's ascii() writes it.

    CEL has no ord(): the character's UTF-8 bytes come from `%x`, and are decoded here.
    """
    digit = f"{string(_HEX)}.indexOf"
    byte = f"{digit}(h.charAt(2 * k)) * 16 + {digit}(h.charAt(2 * k + 1))"
    code_point = (
        "size(b) == 1 ? b[0] : "
        "size(b) == 2 ? (b[0] - 192) * 64 + b[1] - 128 : "
        "size(b) == 3 ? (b[0] - 224) * 4096 + (b[1] - 128) * 64 + b[2] - 128 : "
        "(b[0] - 240) * 262144 + (b[1] - 128) * 4096 + (b[2] - 128) * 64 + b[3] - 128"
    )
    padded = {
        width: f"{string('0' * width)}.substring(0, {width} - size(x)) + x" for width in (2, 4, 8)
    }
    escape = (
        f"p < 256 ? {string(_BACKSLASH + 'x')} + {padded[2]} : "
        f"p < 65536 ? {string(_BACKSLASH + 'u')} + {padded[4]} : "
        f"{string(_BACKSLASH + 'U')} + {padded[8]}"
    )
    return cel.let(
        "h",
        f"{string('%x')}.format([{char}])",
        cel.let(
            "b",
            f"lists.range(size(h) / 2).map(k, {byte})",
            cel.let("p", code_point, cel.let("x", f"{string('%x')}.format([p])", escape)),
        ),
    )


def shorten(value: Expr) -> Expr:
    """CEL for slices.shorten: a quoted, printable-ASCII, bounded rendering of `value`.

    Only the first _SHORT + 1 characters can show: every character renders as at
    least one, and past _SHORT the text is cut to _SHORT - 3.
    """
    head = f"v.substring(0, size(v) < {_SHORT + 1} ? size(v) : {_SHORT + 1})"
    rendered = f"lists.range(size(s)).map(i, {python_ascii_char('s.charAt(i)', 'q')}).join('')"
    quote = string(_QUOTE)
    return cel.let(
        "v",
        value,
        cel.let(
            "q",
            f"v.contains({string(_APOSTROPHE)}) && !v.contains({quote})",
            cel.let(
                "s",
                head,
                cel.let(
                    "r",
                    rendered,
                    f"{quote} + (size(r) <= {_SHORT} ? r : r.substring(0, {_SHORT - 3}) + "
                    f"{string('...')}) + {quote}",
                ),
            ),
        ),
    )


def fallback(config: Config) -> Expr:
    """CEL for slices._describe of the decision the Pod got (not from slice-ratio)."""
    slices, source = variable("slices"), variable("source")
    unit = cel.if_else(f"{slices} == 1", string(" slice"), string(" slices"))
    described = f"{string('the default of ')} + string({slices}) + {unit}"
    if config.policy is not None:
        rules = literal([f" from rule {shorten_text(rule.name)}" for rule in config.policy.rules])
        described = cel.if_else(
            f"{source}.startsWith({string(POLICY_SOURCE_PREFIX)})",
            f"string({slices}) + {unit} + {rules}[{variable('enrollingRule')}]",
            described,
        )
    return cel.if_else(
        f"{source} == {string('workload-type')}",
        f"string({slices}) + {unit} + {string(' from workload-type')}",
        described,
    )


def ignored_warning(key: str, value: Expr, why: str) -> Expr:
    """CEL for slices._warning: only the reason is clipped, so the rest always fits."""
    body = (
        f"head + (size({string(why)}) <= {MAX_WARNING_LENGTH} - size(head) - size(tail) ? "
        f"{string(why)} : {string(why)}.substring(0, {MAX_WARNING_LENGTH - 3} - size(head) - "
        f"size(tail)) + {string('...')}) + tail"
    )
    return cel.let(
        "head",
        f"{string(key + '=')} + {shorten(value)} + {string(' ignored (')}",
        cel.let("tail", f"{string('); using ')} + {variable('fallback')}", body),
    )


def annotation_warnings(config: Config) -> Expr:
    """CEL list of the invalid-annotation warnings, in resolve_slices' order."""
    annotations = variable("annotations")
    ratio_invalid = f"{string(SLICE_RATIO)} in {annotations} && {variable('sliceRatio')} == 0"
    type_unknown = (
        f"{variable('sliceRatio')} == 0 && {string(WORKLOAD_TYPE)} in {annotations} && "
        f"{variable('presetSlices')} == 0"
    )
    ratio_why = f"want a whole number 1-{config.max_slice_ratio}"
    ratio = ignored_warning(SLICE_RATIO, f"{annotations}[{string(SLICE_RATIO)}]", ratio_why)
    workload = ignored_warning(
        WORKLOAD_TYPE, f"{annotations}[{string(WORKLOAD_TYPE)}]", known_types(config)
    )
    return f"({ratio_invalid} ? [{ratio}] : []) + ({type_unknown} ? [{workload}] : [])"


def hand_placed_warning(where: Expr) -> Expr:
    """CEL for the placed-by-hand warning; `where`: "nodeSelector KEY", "node affinity on KEY"."""
    rest = " set by hand; castslice left the Pod unchanged"
    text = f"{where} + {string(rest)}"
    return cel.clip(text, MAX_WARNING_LENGTH)


def less_than_asked_warning(name: Expr, asked: Expr, gpu: str) -> Expr:
    text = (
        f"{string('container ')} + {shorten(name)} + {string(' asked for ')} + {asked} + "
        f"{string(' ' + gpu + '; castslice gives it ')} + {variable('share')}"
    )
    return cel.clip(text, MAX_WARNING_LENGTH)


def less_than_asked(placement: PlacementCel, asked: Expr) -> Expr:
    """CEL for admission._less_than_asked's test: a whole ask above 1 and above the share."""
    return cel.let(
        "asked",
        asked,
        cel.all_of(
            [
                f"asked.matches({string('^[0-9]+$')})",
                "(size(asked) > 18 || int(asked) > 1)",
                placement.gives_less("asked"),
            ]
        ),
    )
