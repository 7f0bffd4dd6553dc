"""Compiled parser for path entries in the layout every writer produces.

``{"position": [x, y, z], "phase": "agent", "episode_id": "17"}`` with the keys in this order,
any JSON whitespace, string ids without escapes: the agent logs and target files of the toolkit
and of the official code. Parsing such a list into arrays directly (no Python object per entry)
is what makes ``ivln-ce score`` on a whole split cost little more than reading the bytes.

Anything else (another key order, escapes, integer ids, a number this parser does not convert
itself) is not an error here: ``parse_canonical`` returns None and the caller uses the general
parser (orjson, then ijson), which also words every error. Numbers are converted with the
Eisel-Lemire algorithm (correctly rounded, as ``float()``); the rare inputs it cannot decide,
and mantissas over 19 digits, are converted by orjson, so results equal the general path's.
"""

from __future__ import annotations

import math

import numpy as np

from ivln_ce.data.numba_cache import cached_jit

try:
    import orjson
except ImportError:  # pragma: no cover - orjson is a dependency
    orjson = None


_jit = cached_jit  # plain calls between kernels: numba's inline="always" compiled slower code, and slower


# --------------------------------------------------------------------------- decimal -> double

MIN_EXP10, MAX_EXP10 = -348, 347


def _powers_of_ten() -> tuple[np.ndarray, np.ndarray]:
    """128-bit mantissas of 10**e, truncated, top bit set (the Eisel-Lemire table)."""
    hi = np.empty(MAX_EXP10 - MIN_EXP10 + 1, dtype=np.uint64)
    lo = np.empty_like(hi)
    for k, e in enumerate(range(MIN_EXP10, MAX_EXP10 + 1)):
        if e >= 0:
            v = 10**e
            shift = v.bit_length() - 128
            m = v >> shift if shift >= 0 else v << -shift
        else:
            d = 10**-e
            q = (1 << (d.bit_length() + 128)) // d  # 129 bits: floor(2**k / 10**-e)
            m = q >> (q.bit_length() - 128)
        hi[k], lo[k] = m >> 64, m & ((1 << 64) - 1)
    return hi, lo


POW10_HI, POW10_LO = _powers_of_ten()

_U0, _U1, _U9, _U32, _U63 = np.uint64(0), np.uint64(1), np.uint64(9), np.uint64(32), np.uint64(63)
_MASK32 = np.uint64(0xFFFFFFFF)
_LOW9 = np.uint64(0x1FF)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)


@_jit
def _mul64(a, b):
    """High and low 64 bits of the 128-bit product a * b (uint64)."""
    a0, a1 = a & _MASK32, a >> _U32
    b0, b1 = b & _MASK32, b >> _U32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    mid = (p00 >> _U32) + (p01 & _MASK32) + (p10 & _MASK32)
    return p11 + (p01 >> _U32) + (p10 >> _U32) + (mid >> _U32), (p00 & _MASK32) | (mid << _U32)


@_jit
def _clz(x):
    n = 0
    for bits, limit in ((32, np.uint64(0xFFFFFFFF)), (16, np.uint64(0xFFFFFFFFFFFF)), (8, np.uint64(0xFFFFFFFFFFFFFF)),
                        (4, np.uint64(0xFFFFFFFFFFFFFFF)), (2, np.uint64(0x3FFFFFFFFFFFFFFF)), (1, np.uint64(0x7FFFFFFFFFFFFFFF))):
        if x <= limit:
            n += bits
            x = x << np.uint64(bits)
    return n


@_jit
def _eisel_lemire(man, exp10, neg):
    """man * 10**exp10 correctly rounded, or ok=False where the algorithm cannot decide (man != 0)."""
    if exp10 < MIN_EXP10 or exp10 > MAX_EXP10:
        return 0.0, False
    clz = _clz(man)
    man = man << np.uint64(clz)
    ret_exp2 = ((217706 * exp10) >> 16) + 64 + 1023 - clz
    k = exp10 - MIN_EXP10
    x_hi, x_lo = _mul64(man, POW10_HI[k])
    if (x_hi & _LOW9) == _LOW9 and (x_lo + man) < man:
        y_hi, y_lo = _mul64(man, POW10_LO[k])
        merged_hi, merged_lo = x_hi, x_lo + y_hi
        if merged_lo < x_lo:
            merged_hi += _U1
        if (merged_hi & _LOW9) == _LOW9 and merged_lo == _ALL and (y_lo + man) < man:
            return 0.0, False
        x_hi, x_lo = merged_hi, merged_lo
    msb = x_hi >> _U63
    ret_man = x_hi >> (msb + _U9)
    ret_exp2 -= 1 - np.int64(msb)
    if x_lo == _U0 and (x_hi & _LOW9) == _U0 and (ret_man & np.uint64(3)) == _U1:
        return 0.0, False  # exactly half-way: the truncated table cannot tell
    ret_man += ret_man & _U1
    ret_man >>= _U1
    if (ret_man >> np.uint64(53)) > _U0:
        ret_man >>= _U1
        ret_exp2 += 1
    if ret_exp2 <= 0 or ret_exp2 >= 0x7FF:
        return 0.0, False  # subnormal or overflow: left to the general conversion
    value = math.ldexp(float(ret_man), ret_exp2 - 1075)
    return (-value if neg else value), True


#: 10**k, exact in a double for k <= 22 (Clinger's fast path)
_EXACT_POW10 = np.array([10.0**k for k in range(23)])
_TWO53 = np.uint64(1 << 53)


@_jit
def _number(buf, i, end):
    """A JSON number at buf[i]: (value, next index, 0 converted | 1 valid, convert elsewhere | -1 not a number)."""
    neg = False
    if i < end and buf[i] == 45:  # -
        neg = True
        i += 1
    if i >= end:
        return 0.0, i, -1
    man = np.uint64(0)
    digits = 0
    exp10 = 0
    truncated = False
    c = np.uint64(buf[i]) - np.uint64(48)
    if c == _U0:  # a leading 0 stands alone
        i += 1
    elif c <= _U9:
        while i < end:
            c = np.uint64(buf[i]) - np.uint64(48)
            if c > _U9:
                break
            if digits < 19:
                man = man * np.uint64(10) + c
                digits += 1
            else:
                exp10 += 1
                truncated = True
            i += 1
    else:
        return 0.0, i, -1
    integer = True
    if i < end and buf[i] == 46:  # .
        integer = False
        i += 1
        if i >= end or np.uint64(buf[i]) - np.uint64(48) > _U9:
            return 0.0, i, -1
        while i < end:
            c = np.uint64(buf[i]) - np.uint64(48)
            if c > _U9:
                break
            if digits < 19:
                if man != _U0 or c != _U0:  # leading zeros are not significant digits
                    man = man * np.uint64(10) + c
                    digits += 1
                exp10 -= 1
            elif c != _U0:
                truncated = True
            i += 1
    if i < end and (buf[i] == 101 or buf[i] == 69):  # e E
        integer = False
        i += 1
        sign = 1
        if i < end and (buf[i] == 43 or buf[i] == 45):
            sign = -1 if buf[i] == 45 else 1
            i += 1
        if i >= end or np.uint64(buf[i]) - np.uint64(48) > _U9:
            return 0.0, i, -1
        e = 0
        while i < end:
            c = np.uint64(buf[i]) - np.uint64(48)
            if c > _U9:
                break
            if e < 100000:
                e = e * 10 + np.int64(c)
            i += 1
        exp10 += sign * e
    if truncated:
        return 0.0, i, 1
    if man == _U0:
        return (-0.0 if neg and not integer else 0.0), i, 0  # an integer -0 is 0, as int -0
    if man <= _TWO53 and -22 <= exp10 <= 22:  # exact operands: one correctly rounded operation
        value = float(man) * _EXACT_POW10[exp10] if exp10 >= 0 else float(man) / _EXACT_POW10[-exp10]
        return (-value if neg else value), i, 0
    value, ok = _eisel_lemire(man, exp10, neg)
    return value, i, (0 if ok else 1)


# --------------------------------------------------------------------------- entries

#: the literal texts of an entry, one per row (passed as an argument)
_LITERALS = np.zeros((6, 16), dtype=np.uint8)
for _row, _text in enumerate((b'"position"', b'"phase"', b'agent"', b'oracle_goal"', b'oracle_start"', b'"episode_id"')):
    _LITERALS[_row, : len(_text)] = np.frombuffer(_text, dtype=np.uint8)


@_jit
def _ws(buf, i, end):
    while i < end and (buf[i] == 32 or buf[i] == 10 or buf[i] == 13 or buf[i] == 9):
        i += 1
    return i


@_jit
def _is(buf, i, end, lits, row, n):
    """Whether buf[i:i+n] is row ``row`` of the literal table."""
    if i + n > end:
        return False
    for k in range(n):
        if buf[i + k] != lits[row, k]:
            return False
    return True


@_jit
def _entries(buf, start, end, lits, pos, phases, id_lo, id_hi, new_run, slow_at, slow_lo, slow_hi):
    """Parse comma-separated canonical entries in buf[start:end]: (count, numbers left to convert), or (-1, 0)."""
    cap = phases.shape[0]
    n = 0
    n_slow = 0
    i = _ws(buf, start, end)
    while True:
        if n >= cap or i >= end or buf[i] != 123:  # {
            return -1, 0
        i = _ws(buf, i + 1, end)
        if not _is(buf, i, end, lits, 0, 10):  # "position"
            return -1, 0
        i = _ws(buf, i + 10, end)
        if i >= end or buf[i] != 58:  # :
            return -1, 0
        i = _ws(buf, i + 1, end)
        if i >= end or buf[i] != 91:  # [
            return -1, 0
        i += 1
        for c in range(3):
            i = _ws(buf, i, end)
            first = i
            value, i, status = _number(buf, i, end)
            if status < 0:
                return -1, 0
            if status == 1:
                slow_at[n_slow], slow_lo[n_slow], slow_hi[n_slow] = 3 * n + c, first, i
                n_slow += 1
                value = np.nan
            pos[n, c] = value
            i = _ws(buf, i, end)
            if i >= end or buf[i] != (44 if c < 2 else 93):  # , ]
                return -1, 0
            i += 1
        i = _ws(buf, i, end)
        if i >= end or buf[i] != 44:
            return -1, 0
        i = _ws(buf, i + 1, end)
        if not _is(buf, i, end, lits, 1, 7):  # "phase"
            return -1, 0
        i = _ws(buf, i + 7, end)
        if i >= end or buf[i] != 58:
            return -1, 0
        i = _ws(buf, i + 1, end)
        if i + 14 > end or buf[i] != 34:  # the opening quote and room for the longest phase
            return -1, 0
        i += 1
        if buf[i] == 97:  # agent
            size, code = 6, 0
        elif buf[i + 7] == 103:  # oracle_goal
            size, code = 12, 1
        else:  # oracle_start
            size, code = 13, 2
        if not _is(buf, i, end, lits, 2 + code, size):
            return -1, 0
        phases[n] = code
        i = _ws(buf, i + size, end)
        if i >= end or buf[i] != 44:
            return -1, 0
        i = _ws(buf, i + 1, end)
        if not _is(buf, i, end, lits, 5, 12):  # "episode_id"
            return -1, 0
        i = _ws(buf, i + 12, end)
        if i >= end or buf[i] != 58:
            return -1, 0
        i = _ws(buf, i + 1, end)
        if i >= end or buf[i] != 34:
            return -1, 0
        i += 1
        s = i
        while i < end and buf[i] != 34:
            if buf[i] < 32 or buf[i] == 92:  # control characters, escapes: the general parser decides
                return -1, 0
            i += 1
        if i >= end or i == s:
            return -1, 0
        id_lo[n], id_hi[n] = s, i
        same = n > 0 and id_hi[n - 1] - id_lo[n - 1] == i - s
        if same:
            p = id_lo[n - 1]
            for k in range(i - s):
                if buf[p + k] != buf[s + k]:
                    same = False
                    break
        new_run[n] = not same
        i = _ws(buf, i + 1, end)
        if i >= end or buf[i] != 125:  # }
            return -1, 0
        n += 1
        i = _ws(buf, i + 1, end)
        if i >= end:
            return n, n_slow
        if buf[i] != 44:
            return -1, 0
        i = _ws(buf, i + 1, end)


def parse_canonical(buf: bytes, start: int, end: int) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray] | None:
    """(positions (n, 3), phase codes, episode id of each run, run lengths) of the entries in
    ``buf[start:end]``, or None when they are not all in the canonical layout."""
    cap = (end - start) // 50 + 2  # a canonical entry has at least 50 bytes
    arr = np.frombuffer(buf, dtype=np.uint8)
    pos = np.empty((cap, 3))
    phases = np.empty(cap, dtype=np.uint8)
    id_lo = np.empty(cap, dtype=np.int64)
    id_hi = np.empty(cap, dtype=np.int64)
    new_run = np.empty(cap, dtype=np.bool_)
    slow_at = np.empty(3 * cap, dtype=np.int64)
    slow_lo = np.empty(3 * cap, dtype=np.int64)
    slow_hi = np.empty(3 * cap, dtype=np.int64)
    n, n_slow = _entries(arr, start, end, _LITERALS, pos, phases, id_lo, id_hi, new_run, slow_at, slow_lo, slow_hi)
    if n <= 0:
        return None
    pos = pos[:n].copy()
    if n_slow:
        if orjson is None:
            return None
        flat = pos.reshape(-1)
        for k in range(n_slow):
            try:
                flat[slow_at[k]] = float(orjson.loads(buf[slow_lo[k] : slow_hi[k]]))
            except (orjson.JSONDecodeError, OverflowError):
                return None
    starts = np.flatnonzero(new_run[:n])
    try:
        ids = [buf[id_lo[s] : id_hi[s]].decode("utf-8") for s in starts.tolist()]
    except UnicodeDecodeError:
        return None
    return pos, phases[:n].copy(), ids, np.diff(np.append(starts, n))
