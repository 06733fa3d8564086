"""Assert tests judged outside the program: split, plain values, verdict.

An assert snippet such as ``assert add(2, 3) == 5`` is split with ``ast`` into
the parts that need the program (*probes*: here ``add(2, 3)``) and the rest
(``<probe 0> == 5``).  Only the probes' source text is sent to the sandboxed
child; it evaluates them after the program and sends back their values as
plain data (``encode`` in ``_sandbox_child``).  ``decode`` rebuilds them in the
trusted parent with exact builtin types only (the child sends a subclass of a
builtin as its builtin value), and ``Split.verdict`` evaluates
the rest of the assert there, with those values substituted.  The expected
values never reach the child, and no object of the program takes part in a
comparison.

A snippet that cannot be split safely is refused (its case fails): anything
but one ``assert`` statement; comprehensions, lambdas and ``:=`` (their local
names cannot be told from the program's); a probe that itself contains a
comparison (the program would decide it); in the part the worker evaluates,
anything but operators, literals, the safe builtins and ``math``'s cheap
functions (no attribute access, no method call).  There, ``**``, ``*`` and
``<<`` refuse results that would be huge (a program could return ``10**9``
for ``assert 2 ** f() == 8``).
"""

from __future__ import annotations

import ast
import builtins
import math
from dataclasses import dataclass
from typing import Any, Union

__all__ = ["Split", "Refused", "split_assert", "decode", "PlainValueError"]

# Names an assert may use that are evaluated in the parent, not taken from the program.
_SAFE_BUILTINS: dict[str, Any] = {
    name: getattr(builtins, name)
    for name in (
        "abs", "all", "any", "bool", "bytes", "chr", "complex", "dict", "divmod", "float", "frozenset", "int",
        "isinstance", "len", "list", "max", "min", "ord", "pow", "range", "repr", "reversed", "round", "set",
        "sorted", "str", "sum", "tuple", "type", "zip",
    )
}
_SAFE_NAMES: dict[str, Any] = {**_SAFE_BUILTINS, "math": math}
# math's cheap members (not factorial, comb, perm or prod, whose cost grows with a value the program chooses).
_MATH_OK = frozenset({
    "isclose", "sqrt", "isqrt", "fabs", "floor", "ceil", "trunc", "isnan", "isinf", "isfinite", "log", "log2", "log10",
    "exp", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "hypot", "degrees", "radians", "gcd", "lcm", "copysign",
    "pow", "fsum", "dist", "pi", "e", "tau", "inf", "nan",
})
_PROBE = "_qworker_probe_"
_BINOP = "_qworker_binop"
_MAX_BITS = 1 << 20  # a power or shift the worker computes stays under a million bits
_MAX_ITEMS = 10_000_000  # a repeated sequence the worker builds stays under ten million items
_MAX_HASHED = 10_000  # a set or dict decoded from the child: colliding hashes make building one quadratic


def _binop(op: str, a: Any, b: Any) -> Any:
    """``a ** b``, ``a * b`` or ``a << b``, refused (OverflowError) when the result would be huge."""
    if op == "pow":
        if type(a) is int and type(b) is int and b > 0 and abs(a) > 1 and b * a.bit_length() > _MAX_BITS:
            raise OverflowError("a power too large to evaluate")
        return a**b
    if op == "lshift":
        if type(b) is int and b > _MAX_BITS:
            raise OverflowError("a shift too large to evaluate")
        return a << b
    for seq, n in ((a, b), (b, a)):
        if isinstance(seq, (str, bytes, list, tuple)) and type(n) is int and len(seq) * n > _MAX_ITEMS:
            raise OverflowError("a repetition too large to evaluate")
    return a * b


def _pow(base: Any, exp: Any, mod: Any = None) -> Any:
    """``pow``, refusing huge results as ``**`` does (see ``_binop``)."""
    return _binop("pow", base, exp) if mod is None else builtins.pow(base, exp, mod)


def _bytes(*args: Any) -> bytes:
    """``bytes``, refusing ``bytes(n)`` for a count the worker will not allocate (``bytes(f())``, ``f() == 10**10``)."""
    if args and type(args[0]) is int and args[0] > _MAX_ITEMS:
        raise OverflowError("a bytes object too large to build")
    return builtins.bytes(*args)


def _range(*args: Any) -> range:
    """``range``, refusing one longer than the worker will walk (``sum(range(f()))`` with ``f() == 10**18``)."""
    r = builtins.range(*args)
    if len(r) > _MAX_ITEMS:
        raise OverflowError("a range too long to evaluate")
    return r


_SAFE_NAMES.update(pow=_pow, range=_range, bytes=_bytes)
_SAFE_BUILTINS.update(pow=_pow, range=_range, bytes=_bytes)


# What the worker evaluates: operators, literals, the safe names and the probes' values.
_PARENT_NODES = (
    ast.Expression, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict,
    ast.Subscript, ast.Slice, ast.Starred, ast.JoinedStr, ast.FormattedValue, ast.Constant, ast.Name, ast.Call,
    ast.keyword, ast.Attribute, ast.Load, ast.operator, ast.boolop, ast.unaryop, ast.cmpop,
)

# Nodes the parent evaluates (with probes substituted); a tainted node of another kind becomes a probe.
_TRANSPARENT = (
    ast.Compare, ast.BoolOp, ast.UnaryOp, ast.BinOp, ast.IfExp, ast.Tuple, ast.List, ast.Set, ast.Dict,
    ast.Subscript, ast.Slice, ast.Starred, ast.JoinedStr, ast.FormattedValue,
)
_REFUSED_ANYWHERE = (
    ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr, ast.Await, ast.Yield,
    ast.YieldFrom,
)


@dataclass(frozen=True)
class Split:
    """An assert whose verdict the parent decides; ``probes`` are evaluated by the child, in order."""

    probes: tuple[str, ...]
    _expr: Any  # code object of the assert's test, probes replaced by names

    def verdict(self, values: list[Any]) -> bool:
        """The assert's truth with the probes' plain ``values``; raises what evaluating it raises."""
        names = {f"{_PROBE}{k}": v for k, v in enumerate(values)}
        scope = {"__builtins__": {}, **_SAFE_NAMES, _BINOP: _binop, **names}
        return bool(eval(self._expr, scope))  # noqa: S307 - checked by _parent_side: operators, safe names, plain values


@dataclass(frozen=True)
class Refused:
    reason: str


def _is_tainted(node: ast.AST) -> bool:
    """Whether ``node`` refers to a name the program defines (anything not in the parent's safe names)."""
    return any(isinstance(n, ast.Name) and n.id not in _SAFE_NAMES for n in ast.walk(node))


def _is_safe_call(node: ast.Call) -> bool:
    f = node.func
    if isinstance(f, ast.Name):
        return f.id in _SAFE_BUILTINS
    return _is_math(f)


def _is_math(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "math"
            and node.attr in _MATH_OK)


class _Guard(ast.NodeTransformer):
    """Route ``**``, ``*`` and ``<<`` through ``_binop``, which refuses huge results."""

    _OPS = {ast.Pow: "pow", ast.Mult: "mult", ast.LShift: "lshift"}

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        self.generic_visit(node)
        op = self._OPS.get(type(node.op))
        if op is None:
            return node
        call = ast.Call(func=ast.Name(id=_BINOP, ctx=ast.Load()), args=[ast.Constant(op), node.left, node.right], keywords=[])
        return ast.copy_location(call, node)


def _parent_side_problem(expr: ast.AST) -> Union[str, None]:
    """Why the worker will not evaluate ``expr`` (the assert with its probes replaced), or None."""
    for n in ast.walk(expr):
        if not isinstance(n, _PARENT_NODES):
            return f"{type(n).__name__} is not evaluated outside the program"
        if isinstance(n, ast.Attribute) and not _is_math(n):
            return f"attribute {n.attr!r} is not evaluated outside the program (only math's)"
        if isinstance(n, ast.Name) and n.id not in _SAFE_NAMES and not n.id.startswith(_PROBE):
            return f"name {n.id!r} is not evaluated outside the program"
        if isinstance(n, ast.Call) and not (isinstance(n.func, ast.Name) or _is_math(n.func)):
            return "a method call is not evaluated outside the program"
    return None


class _Splitter(ast.NodeTransformer):
    def __init__(self) -> None:
        self.probes: list[str] = []

    def visit(self, node: ast.AST) -> Any:
        if not isinstance(node, ast.expr) or not _is_tainted(node):
            return node
        if isinstance(node, _TRANSPARENT) or (isinstance(node, ast.Call) and _is_safe_call(node)):
            return self.generic_visit(node)
        if any(isinstance(n, ast.Compare) for n in ast.walk(node)):
            raise ValueError(f"the program's part {ast.unparse(node)[:80]!r} contains a comparison")
        self.probes.append(ast.unparse(node))
        return ast.copy_location(ast.Name(id=f"{_PROBE}{len(self.probes) - 1}", ctx=ast.Load()), node)


def split_assert(snippet: str) -> Union[Split, Refused]:
    """Split one assert snippet into probes and a parent-side expression, or refuse it."""
    try:
        tree = ast.parse(snippet)
    except SyntaxError as e:
        return Refused(f"SyntaxError: {e.msg}")
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
        return Refused("only a single 'assert <expression>' statement is checked outside the program")
    test = tree.body[0].test
    bad = next((n for n in ast.walk(test) if isinstance(n, _REFUSED_ANYWHERE)), None)
    if bad is not None:
        return Refused(f"{type(bad).__name__} in an assert cannot be checked outside the program")
    splitter = _Splitter()
    try:
        rewritten = splitter.visit(test)
    except ValueError as e:
        return Refused(f"cannot be checked outside the program: {e}")
    expr = ast.Expression(body=rewritten)
    problem = _parent_side_problem(expr)
    if problem is not None:
        return Refused(problem)
    guarded = ast.fix_missing_locations(_Guard().visit(expr))
    return Split(probes=tuple(splitter.probes), _expr=compile(guarded, "<assert>", "eval"))


class PlainValueError(ValueError):
    """A probe's value as sent by the child is not well-formed plain data."""


_MAX_DEPTH = 64
_MAX_INT_HEX = 100_000  # hex digits: ints up to ~400,000 bits


def decode(obj: Any, depth: int = 0) -> Any:
    """Rebuild a value from the child's tagged JSON, with exact builtin types only.

    Tags: ``["n"]`` None, ``["b", bool]``, ``["i", hex]``, ``["f", float.hex]``,
    ``["c", re_hex, im_hex]``, ``["s", str]``, ``["y", hex]`` bytes, and
    ``["l"|"t"|"set"|"fs", [items]]``, ``["d", [[k, v], ...]]``.  Anything else
    raises ``PlainValueError``.
    """
    if depth > _MAX_DEPTH:
        raise PlainValueError("value nested too deeply")
    if type(obj) is not list or not obj or type(obj[0]) is not str:
        raise PlainValueError("malformed value")
    tag, args = obj[0], obj[1:]
    try:
        if tag == "n" and not args:
            return None
        if tag == "b" and len(args) == 1 and type(args[0]) is bool:
            return args[0]
        if tag == "i" and len(args) == 1 and type(args[0]) is str and len(args[0]) <= _MAX_INT_HEX:
            return int(args[0], 16)
        if tag == "f" and len(args) == 1 and type(args[0]) is str:
            return float.fromhex(args[0])
        if tag == "c" and len(args) == 2 and all(type(a) is str for a in args):
            return complex(float.fromhex(args[0]), float.fromhex(args[1]))
        if tag == "s" and len(args) == 1 and type(args[0]) is str:
            return args[0]
        if tag == "y" and len(args) == 1 and type(args[0]) is str:
            return bytes.fromhex(args[0])
        if tag in ("set", "fs", "d") and len(args) == 1 and type(args[0]) is list and len(args[0]) > _MAX_HASHED:
            raise PlainValueError(f"a set or dict of more than {_MAX_HASHED:,} items")
        if tag in ("l", "t", "set", "fs") and len(args) == 1 and type(args[0]) is list:
            items = [decode(item, depth + 1) for item in args[0]]
            return {"l": list, "t": tuple, "set": set, "fs": frozenset}[tag](items)
        if tag == "d" and len(args) == 1 and type(args[0]) is list:
            out = {}
            for pair in args[0]:
                if type(pair) is not list or len(pair) != 2:
                    raise PlainValueError("malformed dict item")
                out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
            return out
    except (ValueError, TypeError, OverflowError) as e:  # bad hex, unhashable set item or key
        raise PlainValueError(f"malformed value: {e}") from None
    raise PlainValueError(f"not a plain value (tag {tag[:20]!r})")
