"""Exact round-trip of the input dataclasses to and from JSON/YAML.

Validation is delegated to pydantic (``TypeAdapter`` over standard dataclasses with
``extra='forbid'``), so an unknown or missing key is an error that names the key path.
Every error becomes one :class:`InputError` line: ``<source>: <field.path>: <problem>``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import typing
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from pydantic import ConfigDict, TypeAdapter, ValidationError

from hetplan.errors import InputError

T = TypeVar("T")

STRICT = ConfigDict(extra="forbid", strict=False, arbitrary_types_allowed=False)


def _forbid_extra(tp: Any, seen: set[int]) -> None:
    """Give every dataclass reachable from ``tp`` the strict config (unknown keys are errors)."""
    if id(tp) in seen:
        return
    seen.add(id(tp))
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if "__pydantic_config__" not in tp.__dict__:
            tp.__pydantic_config__ = STRICT  # type: ignore[attr-defined]
        for hint in typing.get_type_hints(tp).values():
            _forbid_extra(hint, seen)
    for arg in typing.get_args(tp):
        _forbid_extra(arg, seen)


@cache
def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    _forbid_extra(cls, set())
    return TypeAdapter(cls)


def _describe(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "<root>"
    kind = first["type"]
    if kind == "missing":
        return f"{loc}: missing required field"
    if kind in ("extra_forbidden", "unexpected_keyword_argument"):
        return f"{loc}: unknown field"
    if kind == "value_error":  # from __post_init__: the message already carries the numbers
        prefix = "" if loc == "<root>" else f"{loc}: "
        return prefix + str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{loc}: {first['msg']} (got {first.get('input')!r}){more}"


def from_data(cls: type[T], data: Any, source: str) -> T:
    """Build ``cls`` from plain data; raise InputError naming ``source`` and the field."""
    try:
        adapter: TypeAdapter[T] = _adapter(cast(Any, cls))
        return adapter.validate_python(data)
    except ValidationError as err:
        raise InputError(f"{source}: {_describe(err)}") from None
    except ValueError as err:  # raised by __post_init__ checks
        raise InputError(f"{source}: {err}") from None


def to_data(obj: Any) -> Any:
    """Plain JSON-compatible data for a dataclass instance (fields in declaration order)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _adapter(type(obj)).dump_python(obj, mode="json")
    return obj


def read_structured(path: Path) -> Any:
    """Parse a YAML or JSON file; errors name the file and the line."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    try:
        # libyaml's loader when PyYAML was built with it: ~8x faster on big cluster files.
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(f"{path}{where}: invalid YAML: {problem}") from None


def load_file(cls: type[T], path: Path) -> T:
    """Read ``path`` (YAML or JSON) into ``cls``."""
    return from_data(cls, read_structured(path), str(path))


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file, so a failure leaves nothing
    half-written; an unwritable path is an InputError naming it."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as err:
        with contextlib.suppress(OSError):  # the folder may not exist or be a file
            tmp.unlink(missing_ok=True)
        raise InputError(f"{path}: cannot write ({err.strerror})") from None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (see ``write_text_atomic``)."""
    write_text_atomic(path, json.dumps(data, indent=2) + "\n")
