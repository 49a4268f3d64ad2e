"""Hypothesis strategies from a tool's own JSON Schema: valid arguments, and near-misses.

Why not ``hypothesis-jsonschema``: its latest release (0.23.1, 2024) builds
objects with Hypothesis's private ``cu.many(...).more()``, which Hypothesis has
since replaced; with a current Hypothesis every object schema (so every tool
schema) fails with ``AttributeError: 'many' object has no attribute 'more'``.
Pinning an old Hypothesis would fight the tool author's own test suite, so this
module covers the part of JSON Schema that tool schemas use (hand-written ones,
and those msgspec derives from a ``Struct``: ``$ref``/``$defs``, ``anyOf``,
``enum``, formats, numeric and length bounds, ``prefixItems``, ...).

Correctness does not rest on that coverage: ``jsonschema``, the validator the
host itself uses, is the oracle. A generated "valid" value that it rejects is
discarded, and so is a "near-miss" that it accepts. An unsupported keyword can
only make generation slower (more discards), never produce a wrong verdict.

Integers are drawn within 64 bits: the protocol carries JSON numbers as
msgspec does, and a larger integer is refused before it reaches any tool.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import math
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeGuard

import msgspec
from hypothesis import strategies as st

INT_MIN: Final = -(2**63)
INT_MAX: Final = 2**63 - 1
_JSON_TYPES: Final = ("null", "boolean", "integer", "number", "string", "array", "object")
# Keywords that say nothing about which values are valid.
_ANNOTATIONS: Final = frozenset(
    {"title", "description", "default", "examples", "$comment", "$schema", "$id", "deprecated", "readOnly"}
)
# How big generated collections get when the schema sets no bound: enough to
# exercise a tool, small enough that a run of a few hundred calls stays quick.
_EXTRA_ITEMS: Final = 6
_EXTRA_KEYS: Final = 3

JSONStrategy = st.SearchStrategy[Any]
ArgsStrategy = st.SearchStrategy[dict[str, Any]]

# Near-miss kinds, as reported to the user.
DROP_REQUIRED: Final = "a required property left out"
WRONG_TYPE: Final = "a property of the wrong type"
EXTRA_PROPERTY: Final = "an unknown property (additionalProperties is false)"
OUT_OF_RANGE: Final = "a number out of range"
NOT_IN_ENUM: Final = "a value outside the enum"


def _finite_floats(**bounds: Any) -> st.SearchStrategy[float]:
    return st.floats(allow_nan=False, allow_infinity=False, **bounds)


any_json: JSONStrategy = st.recursive(
    st.none() | st.booleans() | st.integers(INT_MIN, INT_MAX) | _finite_floats() | st.text(max_size=10),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=5,
)

# One small value of each JSON type, for "wrong type" near-misses. The number is
# never integral, so that it is wrong for an "integer" property too.
_VALUE_OF_TYPE: Final[dict[str, JSONStrategy]] = {
    "null": st.none(),
    "boolean": st.booleans(),
    "integer": st.integers(-1000, 1000),
    "number": _finite_floats(min_value=-1e6, max_value=1e6).filter(lambda x: not x.is_integer()),
    "string": st.text(max_size=10),
    "array": st.lists(st.integers(-10, 10), max_size=3),
    "object": st.dictionaries(st.text(max_size=5), st.integers(-10, 10), max_size=2),
}


def _encoded(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    # msgspec's own encoding is exactly what a Struct field of that type decodes.
    return strategy.map(lambda value: msgspec.json.decode(msgspec.json.encode(value)))


_FORMATS: Final[dict[str, st.SearchStrategy[str]]] = {
    "date-time": _encoded(st.datetimes(timezones=st.just(datetime.UTC))),
    "date": _encoded(st.dates()),
    "time": _encoded(st.times()),
    "duration": _encoded(st.timedeltas()),
    "uuid": _encoded(st.uuids()),
    "decimal": _encoded(st.decimals(allow_nan=False, allow_infinity=False, places=4).map(decimal.Decimal)),
    "email": st.emails(),
    "ipv4": st.ip_addresses(v=4).map(str),
    "ipv6": st.ip_addresses(v=6).map(str),
    "uri": st.sampled_from(["https://example.com/", "http://localhost:8080/a?b=c", "file:///tmp/x"]),
}


def _types(schema: Mapping[str, Any]) -> list[str]:
    """The JSON types a schema allows, explicit or implied by its keywords."""
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if t in _JSON_TYPES]
    implied = []
    if any(k in schema for k in ("properties", "required", "additionalProperties", "minProperties")):
        implied.append("object")
    if any(k in schema for k in ("items", "prefixItems", "minItems", "maxItems", "uniqueItems")):
        implied.append("array")
    if any(k in schema for k in ("minLength", "maxLength", "pattern", "format")):
        implied.append("string")
    if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")):
        implied.append("number")
    return implied


def _bounds(schema: Mapping[str, Any]) -> tuple[float | None, bool, float | None, bool]:
    """(low, low excluded, high, high excluded), for drafts 4 (boolean exclusives) and 6+."""
    low, high = schema.get("minimum"), schema.get("maximum")
    low_x = high_x = False
    ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_low is True:
        low_x = True
    elif _is_number(ex_low) and (low is None or ex_low >= low):
        low, low_x = ex_low, True
    if ex_high is True:
        high_x = True
    elif _is_number(ex_high) and (high is None or ex_high <= high):
        high, high_x = ex_high, True
    return (
        low if _is_number(low) else None,
        low_x,
        high if _is_number(high) else None,
        high_x,
    )


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class SchemaStrategies:
    """Strategies for one tool's parameters schema.

    Attributes:
        schema: the tool's JSON Schema (``ToolInfo.parameters``).
        is_valid: the oracle, ``jsonschema`` as the host configures it (no
            format assertions, like the host).
    """

    def __init__(self, schema: Mapping[str, Any]) -> None:
        import jsonschema

        self.schema = dict(schema)
        validator = jsonschema.validators.validator_for(self.schema)(self.schema)
        self.is_valid: Callable[[Any], bool] = validator.is_valid
        self._refs: dict[str, JSONStrategy] = {}

    # --- valid values --------------------------------------------------------------

    def valid(self) -> ArgsStrategy:
        """Argument objects the schema accepts."""
        return self.for_schema(self.schema).filter(lambda v: isinstance(v, dict) and self.is_valid(v))

    def for_schema(self, schema: Any) -> JSONStrategy:
        """Values that (mostly) satisfy ``schema``; the caller filters with the oracle."""
        if schema is True or schema == {}:
            return any_json
        if schema is False:
            return st.nothing()
        if not isinstance(schema, Mapping):
            return any_json
        if isinstance(schema.get("$ref"), str):
            return self._ref(schema["$ref"])
        if "const" in schema:
            return st.just(schema["const"])
        if isinstance(schema.get("enum"), list):
            return st.sampled_from(schema["enum"]) if schema["enum"] else st.nothing()
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged = _merge(merged, self._resolve(part))
            return self.for_schema(merged)
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                rest = {k: v for k, v in schema.items() if k != key}
                return st.one_of([self.for_schema(_merge(rest, self._resolve(sub))) for sub in schema[key]])
        types = _types(schema)
        if not types:
            return any_json
        return st.one_of([self._typed(t, schema) for t in types])

    def _resolve(self, schema: Any) -> Any:
        if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
            target = self._pointer(schema["$ref"])
            if target is not None:
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                return _merge(rest, self._resolve(target)) if rest else self._resolve(target)
        return schema

    def _pointer(self, ref: str) -> Any:
        """A local ``#/a/b`` reference, or None for anything else (left to the oracle)."""
        if not ref.startswith("#"):
            return None
        node: Any = self.schema
        for raw in ref[1:].split("/")[1:] if ref != "#" else []:
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def _ref(self, ref: str) -> JSONStrategy:
        # deferred() lets a recursive Struct refer to itself; collections stay
        # small, so recursion ends quickly.
        if ref not in self._refs:
            target = self._pointer(ref)
            self._refs[ref] = any_json if target is None else st.deferred(lambda: self.for_schema(target))
        return self._refs[ref]

    def _typed(self, kind: str, schema: Mapping[str, Any]) -> JSONStrategy:
        if kind == "null":
            return st.none()
        if kind == "boolean":
            return st.booleans()
        if kind == "integer":
            return self._integers(schema)
        if kind == "number":
            return self._numbers(schema)
        if kind == "string":
            return self._strings(schema)
        if kind == "array":
            return self._arrays(schema)
        if kind == "object":
            return self._objects(schema)
        return st.nothing()

    def _integers(self, schema: Mapping[str, Any]) -> st.SearchStrategy[int]:
        low, low_x, high, high_x = _bounds(schema)
        lo = INT_MIN if low is None else (math.floor(low) + 1 if low_x and float(low).is_integer() else math.ceil(low))
        hi = (
            INT_MAX
            if high is None
            else (math.ceil(high) - 1 if high_x and float(high).is_integer() else math.floor(high))
        )
        lo, hi = max(lo, INT_MIN), min(hi, INT_MAX)
        if lo > hi:
            return st.nothing()
        step = schema.get("multipleOf")
        if isinstance(step, int) and not isinstance(step, bool) and step > 0:
            first, last = -(-lo // step), hi // step
            return st.nothing() if first > last else st.integers(first, last).map(lambda n: n * step)
        return st.integers(lo, hi)

    def _numbers(self, schema: Mapping[str, Any]) -> JSONStrategy:
        low, low_x, high, high_x = _bounds(schema)
        floats = _finite_floats(min_value=low, max_value=high, exclude_min=low_x, exclude_max=high_x)
        if low is not None and high is not None and (low > high or (low == high and (low_x or high_x))):
            floats = st.nothing()
        integers = self._integers({**schema, "multipleOf": None})
        step = schema.get("multipleOf")
        if _is_number(step) and step > 0:
            # Multiples of a fractional step: n * step, kept if in range (the oracle decides).
            return st.integers(-(10**6), 10**6).map(lambda n: n * step)
        return st.one_of(integers, floats)

    def _strings(self, schema: Mapping[str, Any]) -> st.SearchStrategy[str]:
        min_len = schema.get("minLength", 0)
        max_len = schema.get("maxLength")
        min_len = min_len if isinstance(min_len, int) and min_len >= 0 else 0
        max_len = max_len if isinstance(max_len, int) and max_len >= min_len else None
        pattern, fmt = schema.get("pattern"), schema.get("format")
        strategy: st.SearchStrategy[str]
        if isinstance(pattern, str):
            # JSON Schema patterns are unanchored searches, as from_regex draws them.
            strategy = st.from_regex(pattern)
        elif schema.get("contentEncoding") == "base64":
            strategy = st.binary(max_size=32).map(lambda b: base64.b64encode(b).decode())
        elif isinstance(fmt, str) and fmt in _FORMATS:
            strategy = _FORMATS[fmt]
        else:
            return st.text(min_size=min_len, max_size=max_len if max_len is not None else min_len + 20)
        if min_len or max_len is not None:
            strategy = strategy.filter(lambda s: min_len <= len(s) <= (max_len if max_len is not None else len(s)))
        return strategy

    def _arrays(self, schema: Mapping[str, Any]) -> st.SearchStrategy[list[Any]]:
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # drafts before 2020-12: items as a tuple
            prefix, items = items, schema.get("additionalItems", True)
        prefix = prefix if isinstance(prefix, list) else []
        min_items = schema.get("minItems", 0)
        min_items = min_items if isinstance(min_items, int) and min_items >= 0 else 0
        max_items = schema.get("maxItems")
        max_items = max_items if isinstance(max_items, int) and max_items >= 0 else None
        head = st.tuples(*(self.for_schema(s) for s in prefix)).map(list)
        rest_min = max(0, min_items - len(prefix))
        rest_max = rest_min + _EXTRA_ITEMS
        if max_items is not None:
            rest_max = max(0, min(rest_max, max_items - len(prefix)))
        if items is False or rest_max < rest_min:
            rest_min = rest_max = 0
        unique = schema.get("uniqueItems") is True
        tail = st.lists(
            self.for_schema(items),
            min_size=rest_min,
            max_size=rest_max,
            unique_by=(lambda v: msgspec.json.encode(v, order="sorted")) if unique else None,
        )
        return st.tuples(head, tail).map(lambda parts: parts[0] + parts[1])

    def _objects(self, schema: Mapping[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
        props = schema.get("properties")
        props = props if isinstance(props, Mapping) else {}
        required = [r for r in schema.get("required", []) if isinstance(r, str)]
        extra_schema = schema.get("additionalProperties", True)
        prop_strategies = {name: self.for_schema(sub) for name, sub in props.items()}
        for name in required:
            prop_strategies.setdefault(name, any_json)
        names_schema = schema.get("propertyNames")
        key_strategy = self.for_schema(names_schema) if isinstance(names_schema, Mapping) else st.text(max_size=8)
        extras: st.SearchStrategy[dict[Any, Any]] = st.just({})
        if extra_schema is not False:
            extras = st.dictionaries(
                key_strategy.filter(lambda k: isinstance(k, str) and k not in prop_strategies),
                self.for_schema(extra_schema),
                max_size=_EXTRA_KEYS,
            )

        @st.composite
        def objects(draw: st.DrawFn) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for name, strategy in prop_strategies.items():
                # An optional property shrinks to "left out": minimal reproducers
                # show only what matters.
                if name in required or draw(st.booleans()):
                    out[name] = draw(strategy)
            for key, value in draw(extras).items():
                out.setdefault(key, value)
            return out

        return objects()

    # --- near-misses ----------------------------------------------------------------

    def near_miss_kinds(self) -> list[str]:
        """The near-miss kinds this schema allows (it may reject nothing we know how to build)."""
        root = self._resolve(self.schema)
        if not isinstance(root, Mapping):
            return []
        props = root.get("properties") if isinstance(root.get("properties"), Mapping) else {}
        assert isinstance(props, Mapping)
        kinds = []
        if any(isinstance(r, str) for r in root.get("required", [])):
            kinds.append(DROP_REQUIRED)
        if any(self._wrong_types(sub) for sub in props.values()):
            kinds.append(WRONG_TYPE)
        if root.get("additionalProperties") is False:
            kinds.append(EXTRA_PROPERTY)
        if any(_bounds(self._resolve(sub))[::2] != (None, None) for sub in props.values() if _is_schema(sub)):
            kinds.append(OUT_OF_RANGE)
        if any(isinstance(self._resolve(sub).get("enum"), list) for sub in props.values() if _is_schema(sub)):
            kinds.append(NOT_IN_ENUM)
        return kinds

    def near_misses(self) -> st.SearchStrategy[tuple[str, dict[str, Any]]]:
        """``(kind, arguments)``: a valid object with one thing broken, which the schema rejects."""
        root = self._resolve(self.schema)
        props: Mapping[str, Any] = root.get("properties") or {}
        required = [r for r in root.get("required", []) if isinstance(r, str)]
        kinds = self.near_miss_kinds()
        valid = self.valid()

        @st.composite
        def near_miss(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
            kind = draw(st.sampled_from(kinds))
            args = dict(draw(valid))
            if kind == DROP_REQUIRED:
                args.pop(draw(st.sampled_from(required)), None)
            elif kind == WRONG_TYPE:
                name = draw(st.sampled_from([n for n, sub in props.items() if self._wrong_types(sub)]))
                args[name] = draw(st.sampled_from(self._wrong_types(props[name])).flatmap(_VALUE_OF_TYPE.__getitem__))
            elif kind == EXTRA_PROPERTY:
                key = draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in props))
                args[key] = draw(_VALUE_OF_TYPE["integer"] | _VALUE_OF_TYPE["string"])
            elif kind == OUT_OF_RANGE:
                bounded = [
                    n
                    for n, sub in props.items()
                    if _is_schema(sub) and _bounds(self._resolve(sub))[::2] != (None, None)
                ]
                name = draw(st.sampled_from(bounded))
                args[name] = draw(_out_of_range(self._resolve(props[name])))
            else:
                with_enum = [
                    n
                    for n, sub in props.items()
                    if _is_schema(sub) and isinstance(self._resolve(sub).get("enum"), list)
                ]
                name = draw(st.sampled_from(with_enum))
                enum = self._resolve(props[name])["enum"]
                args[name] = draw(st.one_of(list(_VALUE_OF_TYPE.values())).filter(lambda v: v not in enum))
            return kind, args

        return near_miss().filter(lambda pair: not self.is_valid(pair[1]))

    def _wrong_types(self, schema: Any) -> list[str]:
        schema = self._resolve(schema)
        if not isinstance(schema, Mapping):
            return []
        branches = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(branches, list):
            allowed: set[str] = set()
            for branch in branches:
                branch = self._resolve(branch)
                types = _types(branch) if isinstance(branch, Mapping) else []
                if not types:
                    return []  # a branch that takes anything: no type is surely wrong
                allowed.update(types)
        else:
            if "type" not in schema:
                return []
            allowed = set(_types(schema))
        if "number" in allowed:
            allowed.add("integer")
        return [t for t in _JSON_TYPES if t not in allowed]


def _is_schema(value: Any) -> bool:
    return isinstance(value, Mapping)


def _out_of_range(schema: Mapping[str, Any]) -> JSONStrategy:
    """A number just past (or far past) one of the bounds; exclusive bounds themselves included."""
    low, low_x, high, high_x = _bounds(schema)
    integral = "integer" in _types(schema) and "number" not in _types(schema)
    gap: st.SearchStrategy[float] = st.integers(1, 10**6) if integral else _finite_floats(min_value=1e-6, max_value=1e6)
    options: list[JSONStrategy] = []
    if low is not None:
        below = gap.map(lambda d: low - d)
        options.append(st.just(low) | below if low_x else below)
    if high is not None:
        above = gap.map(lambda d: high + d)
        options.append(st.just(high) | above if high_x else above)
    return st.one_of(options)


def _merge(a: Mapping[str, Any], b: Any) -> dict[str, Any]:
    """A naive conjunction of two schemas, good enough to steer generation (the oracle checks)."""
    out = dict(a)
    if not isinstance(b, Mapping):
        return out
    for key, value in b.items():
        if key in _ANNOTATIONS:
            continue
        if key == "properties" and isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            out[key] = {**out[key], **value}
        elif key == "required" and isinstance(out.get(key), list) and isinstance(value, list):
            out[key] = [*out[key], *(r for r in value if r not in out[key])]
        elif key == "type" and key in out:
            mine = set(_types({"type": out[key]}))
            theirs = _types({"type": value})
            both = [t for t in theirs if t in mine or (t == "integer" and "number" in mine)]
            out[key] = both
        else:
            out[key] = value
    return out
