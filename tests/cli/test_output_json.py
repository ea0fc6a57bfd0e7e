"""``cli.output.dumps_indented``: the text of ``json.dumps(data, indent=2)``, shared containers
included (issue 27: the ranking of a 10,000-device search printed in seconds)."""

from __future__ import annotations

import enum
import json
import math
from collections import Counter, OrderedDict
from typing import Any

import pytest

from hetplan.cli.output import dumps_indented


class Colour(enum.IntEnum):
    RED = 1


class Name(enum.StrEnum):
    A = "a"


class Ratio(float):
    pass


SHARED: dict[str, Any] = {"x": [1.5, {"deep": [True, None]}], "y": {}}
CASES: dict[str, Any] = {
    "scalars": [0, -1, 2**70, 0.1, -0.0, 1e-300, 1e16, True, False, None, "", "é\n\"\\\x00"],
    "non-finite floats": [math.nan, math.inf, -math.inf],
    "empty containers": {"a": [], "b": {}, "c": ((),), "d": [[], {}]},
    "keys of every kind": {3: "int", 2.5: "float", True: "bool", None: "none", "ü": "str"},
    "subclasses": [Colour.RED, Name.A, Ratio(0.25), Counter(a=2), OrderedDict(b=[1])],
    "a container shared at several depths": {
        "first": SHARED, "list": [SHARED, [SHARED]], "dict": {"k": SHARED}, "again": SHARED,
    },
    "shared deep first, then shallow": {"list": [[SHARED]], "top": SHARED, "mid": [SHARED]},
    "shared at depth 2 first, then 1": {"mid": [SHARED], "top": SHARED},
    "top-level scalar": 3.25,
    "top-level string": "text",
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_same_text_as_json_dumps(name: str) -> None:
    data = CASES[name]
    assert dumps_indented(data) == json.dumps(data, indent=2)


def test_refuses_what_json_refuses() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps_indented({"a": [object()]})
    with pytest.raises(TypeError, match="keys must be"):
        dumps_indented({(1, 2): 0})
