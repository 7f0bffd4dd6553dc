"""A JSON writer for tests: any layout, escapes, key order, and repeated keys (which dicts cannot hold)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass


class Pairs(list):
    """A JSON object as (key, value) pairs: may repeat a key, which dicts cannot."""


class Raw(str):
    """Text written verbatim (number literals json.dumps cannot produce)."""


@dataclass
class Style:
    indent: int | None = None
    space: str = " "  # after ':' and ','
    ascii: bool = True
    escape_letters: bool = False  # write some plain letters as \\u escapes (still the same strings)
    shuffle: random.Random | None = None  # reorder object keys


def _string(s: str, st: Style) -> str:
    if not st.escape_letters:
        return json.dumps(s, ensure_ascii=st.ascii)
    return '"' + "".join(f"\\u{ord(c):04x}" if c in "ae" else json.dumps(c, ensure_ascii=st.ascii)[1:-1] for c in s) + '"'


def emit(v, st: Style, level: int = 0) -> str:
    nl = "" if st.indent is None else "\n" + " " * (st.indent * (level + 1))
    end = "" if st.indent is None else "\n" + " " * (st.indent * level)
    comma = "," + ("" if st.indent is not None else st.space)
    if isinstance(v, (dict, Pairs)):
        items = list(v.items()) if isinstance(v, dict) else list(v)
        if st.shuffle is not None:
            st.shuffle.shuffle(items)
        if not items:
            return "{}"
        body = (comma + nl).join(_string(k, st) + ":" + st.space + emit(x, st, level + 1) for k, x in items)
        return "{" + nl + body + end + "}"
    if isinstance(v, list):
        if not v:
            return "[]"
        return "[" + nl + (comma + nl).join(emit(x, st, level + 1) for x in v) + end + "]"
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, str):
        return _string(v, st)
    return json.dumps(v)  # numbers (any size), true/false/null
