"""A small evaluator of the PromQL that examples/prometheus/alerts.yml uses, for its tests where
promtool is not installed: instant selectors with ``=`` matchers, ``increase``/``rate`` of a
range selector over two samples, ``sum by``/``max by``, ``or``, arithmetic and comparisons
(vector-scalar, and vector-vector matched one-to-one on every label but the name).

``increase`` is the last sample minus the first (a counter reset counts from 0), and ``rate``
that over the seconds between them: Prometheus extrapolates both to the range's edges, which
changes no comparison with 0 and no ratio of two rates of one window, the only uses here.
"""

from __future__ import annotations

import re
from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple, Union

Labels = FrozenSet[Tuple[str, str]]
Vector = Dict[Labels, float]
Value = Union[Vector, float]
#: One scrape of every series: labels (with __name__) -> value.
Samples = Mapping[Labels, float]

_TOKEN = re.compile(r'\s*(?:(?P<num>\d+(?:\.\d+)?(?![\w:]))|(?P<dur>\[\d+[smhd]\])|(?P<str>"[^"]*")'
                    r'|(?P<op>==|!=|>=|<=|[(){},=><+\-*/])|(?P<id>[A-Za-z_:][\w:]*))')  # fmt: skip
_COMPARE = {">": float.__gt__, "<": float.__lt__, ">=": float.__ge__, "<=": float.__le__,
            "==": float.__eq__, "!=": float.__ne__}  # fmt: skip
_ARITH = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__,
          "/": lambda a, b: a / b if b else float("nan")}  # fmt: skip


def labels(name: str, **pairs: str) -> Labels:
    """The label set of a series named ``name``."""
    return frozenset({"__name__": name, **pairs}.items())


def _without_name(key: Labels) -> Labels:
    return frozenset(pair for pair in key if pair[0] != "__name__")


class Evaluator:
    """Evaluates an expression at the ``now`` scrape, ``before`` being the scrape ``seconds`` earlier."""

    def __init__(self, before: Samples, now: Samples, seconds: float) -> None:
        self.before, self.now, self.seconds = before, now, seconds

    def evaluate(self, expr: str) -> Value:
        """The value of ``expr``: a vector (labels -> value) or a scalar."""
        self._tokens = [(kind, text) for match in _TOKEN.finditer(expr) for kind, text in match.groupdict().items()
                        if text is not None]  # fmt: skip
        assert "".join(text for _, text in self._tokens) == re.sub(r"\s+", "", expr), f"cannot read {expr!r}"
        self._at = 0
        value = self._binary(0)
        assert self._at == len(self._tokens), f"left over in {expr!r}: {self._tokens[self._at:]}"
        return value

    # -- parsing, by precedence: or < comparisons < + - < * / ----------------------------

    _LEVELS: List[Tuple[str, ...]] = [("or",), tuple(_COMPARE), ("+", "-"), ("*", "/")]

    def _peek(self) -> Optional[str]:
        return self._tokens[self._at][1] if self._at < len(self._tokens) else None

    def _take(self, expected: Optional[str] = None) -> str:
        text = self._tokens[self._at][1]
        assert expected is None or text == expected, (expected, text)
        self._at += 1
        return text

    def _binary(self, level: int) -> Value:
        if level == len(self._LEVELS):
            return self._unary()
        left = self._binary(level + 1)
        while self._peek() in self._LEVELS[level]:
            op = self._take()
            left = _apply(op, left, self._binary(level + 1))
        return left

    def _unary(self) -> Value:
        kind, text = self._tokens[self._at]
        if kind == "num":
            self._take()
            return float(text)
        if text == "(":
            self._take()
            value = self._binary(0)
            self._take(")")
            return value
        name = self._take()
        if name in ("sum", "max"):
            self._take("by")
            by = self._names()
            self._take("(")
            inner = self._binary(0)
            self._take(")")
            assert isinstance(inner, dict)
            return _aggregate(name, by, inner)
        if name in ("rate", "increase"):
            self._take("(")
            selected = self._selector(self._take())
            assert self._tokens[self._at][0] == "dur", "rate and increase take a range"
            self._take()
            self._take(")")
            return self._growth(selected, per_second=name == "rate")
        return {key: self.now[key] for key in self._selector(name)}

    def _names(self) -> List[str]:
        self._take("(")
        names = [self._take()]
        while self._peek() == ",":
            self._take()
            names.append(self._take())
        self._take(")")
        return names

    def _selector(self, name: str) -> List[Labels]:
        """The keys of the ``now`` scrape that ``name{...}`` selects."""
        wanted = {"__name__": name}
        if self._peek() == "{":
            self._take()
            while self._peek() != "}":
                label = self._take()
                self._take("=")
                wanted[label] = self._take()[1:-1]
                if self._peek() == ",":
                    self._take()
            self._take("}")
        return [key for key in self.now if all((k, v) in key for k, v in wanted.items())]

    def _growth(self, keys: List[Labels], per_second: bool) -> Vector:
        out: Vector = {}
        for key in keys:
            if key not in self.before:
                continue  # one sample in the range: no value, as in Prometheus
            last, first = self.now[key], self.before[key]
            grown = last - first if last >= first else last
            out[_without_name(key)] = grown / self.seconds if per_second else grown
        return out


def _aggregate(how: str, by: List[str], vector: Vector) -> Vector:
    groups: Dict[Labels, List[float]] = {}
    for key, value in vector.items():
        group = frozenset(pair for pair in key if pair[0] in by)
        groups.setdefault(group, []).append(value)
    return {group: (sum(values) if how == "sum" else max(values)) for group, values in groups.items()}


def _apply(op: str, left: Value, right: Value) -> Value:
    if op == "or":
        assert isinstance(left, dict) and isinstance(right, dict)
        seen = {_without_name(key) for key in left}
        return {**left, **{key: value for key, value in right.items() if _without_name(key) not in seen}}
    if isinstance(left, float) and isinstance(right, float):
        return _ARITH[op](left, right) if op in _ARITH else float(_COMPARE[op](left, right))
    if op in _COMPARE:
        compare = _COMPARE[op]
        if isinstance(right, float):
            assert isinstance(left, dict)
            return {key: value for key, value in left.items() if compare(value, right)}
        assert isinstance(left, dict)
        matched = {_without_name(key): value for key, value in right.items()}
        return {_without_name(key): value for key, value in left.items()
                if _without_name(key) in matched and compare(value, matched[_without_name(key)])}  # fmt: skip
    arith = _ARITH[op]
    if isinstance(right, float):
        assert isinstance(left, dict)
        return {_without_name(key): arith(value, right) for key, value in left.items()}
    assert isinstance(left, dict)
    matched = {_without_name(key): value for key, value in right.items()}
    return {_without_name(key): arith(value, matched[_without_name(key)]) for key, value in left.items()
            if _without_name(key) in matched}  # fmt: skip
