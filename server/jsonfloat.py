"""Doubles printed as b10621's JSON library (nlohmann) prints them: Grisu2 digits in its %g-like layout.

Grisu2 is not always the shortest round-trip form that Python's repr() gives (3.14159e20 comes out as
3.1415900000000003e+20, and about one float32 value in 300 widened to double gets a 17th digit), so the
algorithm is reproduced as is. Used where bytes must match: JSON schema text in grammars, embedding vectors.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

# nlohmann prints doubles with Grisu2, which is not always the shortest round-trip form
# (3.14159e20 comes out as 3.1415900000000003e+20), so the algorithm is reproduced as is.

_GRISU_ALPHA = -60
_CACHED_POWERS_MIN_DEC_EXP = -300
_CACHED_POWERS_DEC_STEP = 8


def _cached_power(k: int) -> tuple[int, int]:
    """10^k as a 64-bit significand (rounded to nearest, ties up) and a binary exponent."""
    value = Fraction(10) ** k
    e = value.numerator.bit_length() - value.denominator.bit_length() - 64
    while value / Fraction(2) ** e >= 2**64:
        e += 1
    while value / Fraction(2) ** e < 2**63:
        e -= 1
    return int(value / Fraction(2) ** e + Fraction(1, 2)), e


_CACHED_POWERS = [(_cached_power(k), k) for k in range(_CACHED_POWERS_MIN_DEC_EXP, 325, _CACHED_POWERS_DEC_STEP)]


def _c_div(a: int, b: int) -> int:
    """C integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _diyfp_mul(xf: int, xe: int, yf: int, ye: int) -> tuple[int, int]:
    # upper 64 bits of the 128-bit product, rounded half up
    return (xf * yf + (1 << 63)) >> 64, xe + ye + 64


def _normalize(f: int, e: int) -> tuple[int, int]:
    shift = 64 - f.bit_length()
    return f << shift, e - shift


def _grisu2_round(digits: list[int], dist: int, delta: int, rest: int, ten_k: int) -> None:
    while rest < dist and delta - rest >= ten_k and (rest + ten_k < dist or dist - rest > rest + ten_k - dist):
        digits[-1] -= 1
        rest += ten_k


def _grisu2_digit_gen(m_minus: int, w: int, m_plus: int, e: int, digits: list[int]) -> int:
    """Append the digits of a value in [m_minus, m_plus] (exponent e); return the decimal exponent shift."""
    delta = m_plus - m_minus
    dist = m_plus - w
    shift = -e
    mask = (1 << shift) - 1
    p1, p2 = m_plus >> shift, m_plus & mask
    n = len(str(p1))
    pow10 = 10 ** (n - 1)
    while n > 0:
        d, p1 = divmod(p1, pow10)
        digits.append(d)
        n -= 1
        rest = (p1 << shift) + p2
        if rest <= delta:
            _grisu2_round(digits, dist, delta, rest, pow10 << shift)
            return n
        pow10 //= 10
    m = 0
    while True:
        p2 *= 10
        digits.append(p2 >> shift)
        p2 &= mask
        m += 1
        delta *= 10
        dist *= 10
        if p2 <= delta:
            break
    _grisu2_round(digits, dist, delta, p2, 1 << shift)
    return -m


def _grisu2(value: float) -> tuple[str, int]:
    """Digits and decimal exponent (value ~= digits * 10^exponent) of a finite positive double."""
    bits = struct.unpack("<Q", struct.pack("<d", value))[0]
    biased_e, fraction = bits >> 52, bits & ((1 << 52) - 1)
    if biased_e == 0:
        vf, ve = fraction, -1074
    else:
        vf, ve = fraction + (1 << 52), biased_e - 1075
    plus_f, plus_e = _normalize(2 * vf + 1, ve - 1)
    if fraction == 0 and biased_e > 1:  # the lower neighbour is closer
        minus_f, minus_e = 4 * vf - 1, ve - 2
    else:
        minus_f, minus_e = 2 * vf - 1, ve - 1
    minus_f <<= minus_e - plus_e
    v_f, v_e = _normalize(vf, ve)

    f = _GRISU_ALPHA - plus_e - 1
    k = _c_div(f * 78913, 1 << 18) + (1 if f > 0 else 0)
    index = _c_div(-_CACHED_POWERS_MIN_DEC_EXP + k + _CACHED_POWERS_DEC_STEP - 1, _CACHED_POWERS_DEC_STEP)
    (c_f, c_e), c_k = _CACHED_POWERS[index]

    w_f, _ = _diyfp_mul(v_f, v_e, c_f, c_e)
    lo_f, _ = _diyfp_mul(minus_f, plus_e, c_f, c_e)
    hi_f, e = _diyfp_mul(plus_f, plus_e, c_f, c_e)
    digits: list[int] = []
    decimal_exponent = -c_k + _grisu2_digit_gen(lo_f + 1, w_f, hi_f - 1, e, digits)
    return "".join(map(str, digits)), decimal_exponent


def _append_exponent(e: int) -> str:
    sign = "-" if e < 0 else "+"
    return f"{sign}{abs(e):02d}"


def dump_float(x: float) -> str:
    """nlohmann's to_chars: Grisu2 digits, %g-like layout, always looks like a float."""
    if not math.isfinite(x):
        return "null"
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    x = abs(x)
    if x == 0:
        return sign + "0.0"
    digits, exponent = _grisu2(x)
    k = len(digits)
    n = k + exponent
    if k <= n <= 15:
        body = digits + "0" * (n - k) + ".0"
    elif 0 < n <= 15:
        body = digits[:n] + "." + digits[n:]
    elif -4 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
        body = mantissa + "e" + _append_exponent(n - 1)
    return sign + body
