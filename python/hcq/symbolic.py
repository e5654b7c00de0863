"""Symbolic integers (include/hcq/symbolic.h): variables and expressions for kernel values and
launch sizes that change between replays.

`n = hcq.sym("n", 1, 4096)` makes a variable; `n * 4`, `(n + 255) // 256`, `n.min(64)` build
expressions (floor division and modulo as in Python). A launch given symbolic operands is recorded
with them by a capture, and each replay computes them from its values. `n.bind(100)` is the
variable with a value for the call at hand (as tinygrad's Variable.bind): a launch, or an
@hcq.jit function, reads the values from the bound variables it is given.
"""
import threading
from typing import Dict, Iterable, Mapping, Union

from ._ffi import NULL, ffi, lib, text
from .status import InvalidArgument, OutOfMemory, check

INT32_MAX = 2**31 - 1


class Expr:
    """An immutable symbolic integer expression. Arithmetic with ints and other Exprs gives Exprs;
    `bindings` carries the values of the bound variables it was built from."""

    __slots__ = ("_ptr", "bindings", "__weakref__")

    def __init__(self, ptr, bindings=None):
        if ptr == NULL:
            raise OutOfMemory("hcq: an expression could not be built (out of memory, or an invalid operand)")
        self._ptr = ptr
        self.bindings = bindings or {}

    def __del__(self):
        if getattr(self, "_ptr", NULL) != NULL:
            lib.hcq_expr_release(self._ptr)
            self._ptr = NULL

    def _binary(self, op, other, swap=False):
        other = as_expr(other)
        a, b = (other, self) if swap else (self, other)
        return Expr(lib.hcq_expr_binary(op, a._ptr, b._ptr), {**a.bindings, **b.bindings})

    def __add__(self, o): return self._binary(lib.HCQ_EXPR_ADD, o)
    def __radd__(self, o): return self._binary(lib.HCQ_EXPR_ADD, o, True)
    def __sub__(self, o): return self._binary(lib.HCQ_EXPR_SUB, o)
    def __rsub__(self, o): return self._binary(lib.HCQ_EXPR_SUB, o, True)
    def __mul__(self, o): return self._binary(lib.HCQ_EXPR_MUL, o)
    def __rmul__(self, o): return self._binary(lib.HCQ_EXPR_MUL, o, True)
    def __floordiv__(self, o): return self._binary(lib.HCQ_EXPR_FLOORDIV, o)
    def __rfloordiv__(self, o): return self._binary(lib.HCQ_EXPR_FLOORDIV, o, True)
    def __mod__(self, o): return self._binary(lib.HCQ_EXPR_MOD, o)
    def __rmod__(self, o): return self._binary(lib.HCQ_EXPR_MOD, o, True)

    def __neg__(self):
        return Expr(lib.hcq_expr_neg(self._ptr), self.bindings)

    def min(self, other) -> "Expr":
        """min(self, other), symbolically."""
        return self._binary(lib.HCQ_EXPR_MIN, other)

    def max(self, other) -> "Expr":
        """max(self, other), symbolically."""
        return self._binary(lib.HCQ_EXPR_MAX, other)

    def eval(self, values: Mapping["Var", int] = None) -> int:
        """The value with the given variable values (and the bound ones): hcq.NotFound for a
        variable without one, hcq.OutOfRange outside its range or on overflow / division by zero."""
        vals, keep = var_values({**self.bindings, **(values or {})})
        out = ffi.new("int64_t *")
        check(lib.hcq_expr_eval(self._ptr, vals, len(keep), out))
        return out[0]

    def __str__(self) -> str:
        size = lib.hcq_expr_format(self._ptr, NULL, 0) + 1
        out = ffi.new("char[]", size)
        lib.hcq_expr_format(self._ptr, out, size)
        return text(out)

    def __repr__(self) -> str:
        return "hcq.Expr(%s)" % self

    def __eq__(self, other):
        return isinstance(other, Expr) and bool(lib.hcq_expr_equal(self._ptr, other._ptr))

    def __hash__(self):
        return hash(str(self))

    def __bool__(self):
        raise TypeError("a symbolic expression has no truth value; compare with eval()")


class Var(Expr):
    """A variable: a name and an inclusive range [min, max]. Two variables of the same name are
    different variables (identity is the object)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return text(lib.hcq_var_name(self._ptr))

    @property
    def range(self):
        return (lib.hcq_var_min(self._ptr), lib.hcq_var_max(self._ptr))

    def bind(self, value: int) -> "Var":
        """This variable carrying a value for the call it is passed to (checked against its range)."""
        check(lib.hcq_var_check(self._ptr, int(value)))
        # The same C variable: equal to self and hashed alike, so it is the same key in values dicts.
        return Var(lib.hcq_expr_retain(self._ptr), {self: int(value)})

    def __eq__(self, other):
        return isinstance(other, Expr) and bool(lib.hcq_expr_equal(self._ptr, other._ptr))

    def __hash__(self):
        return int(ffi.cast("uintptr_t", self._ptr))

    def __repr__(self) -> str:
        lo, hi = self.range
        value = self.bindings.get(self, None) if self.bindings else None
        return "hcq.sym(%r, %d, %d)%s" % (self.name, lo, hi, "" if value is None else ".bind(%d)" % value)


def sym(name: str, min: int = 0, max: int = INT32_MAX) -> Var:
    """A new symbolic variable named name (an identifier) with values in [min, max]
    (hcq.InvalidArgument for a bad name or min > max)."""
    out = ffi.new("hcq_expr_t **")
    check(lib.hcq_var_create(name.encode(), min, max, out))
    return Var(out[0])


def as_expr(value: Union[int, Expr]) -> Expr:
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument("a symbolic operand must be an int or an hcq expression, not %r" % (value,))
    return Expr(lib.hcq_expr_const(value))


def var_values(values: Mapping[Var, int]):
    """A C hcq_var_value_t array for {variable: value}, and the list that keeps it alive."""
    items = list(values.items())
    array = ffi.new("hcq_var_value_t[]", max(len(items), 1))
    for i, (var, value) in enumerate(items):
        if not isinstance(var, Var):
            raise InvalidArgument("values: key %r is not a variable made by hcq.sym()" % (var,))
        array[i].var = var._ptr
        array[i].value = int(value)
    return array, items


# The values of the capture open on this thread (hcq.capture(values=...)): launches inside read them.
capture_values = threading.local()


def bindings_of(operands: Iterable) -> Dict[Var, int]:
    """The values for a launch's symbolic operands: those of the capture open on this thread, then
    those bound into the operands (Exprs built from bound variables)."""
    out: Dict[Var, int] = dict(getattr(capture_values, "values", None) or {})
    for op in operands:
        if isinstance(op, Expr) and op.bindings:
            out.update(op.bindings)
    return out
