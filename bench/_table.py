"""Rows, sections and targets, and how they are printed."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench._stats import median, quantile


@dataclass
class Row:
    """One measured case: samples (or a single value) in ``unit``."""

    case: str
    samples: list[float] = field(default_factory=list)
    unit: str = "us"
    value: float | None = None  # a single figure, when there are no samples
    p90: bool = True
    ref: bool = False
    note: str = ""
    error: str | None = None
    rounds: list[float] = field(default_factory=list)  # per-round medians, shown when there are several
    compare: bool = True  # show the ratio to the section's reference row

    @property
    def median(self) -> float | None:
        if self.value is not None:
            return self.value
        return median(self.samples) if self.samples else None

    @property
    def n(self) -> int:
        return len(self.samples)


@dataclass
class Section:
    key: str
    title: str
    ref_says: str
    rows: list[Row] = field(default_factory=list)

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        return row

    def ref(self) -> Row | None:
        return next((r for r in self.rows if r.ref), None)

    def find(self, case_prefix: str) -> Row | None:
        return next((r for r in self.rows if r.case.startswith(case_prefix) and r.median is not None), None)


@dataclass
class Target:
    what: str
    measured: float | None  # a ratio (x) or an absolute value in `unit`
    bound: float
    unit: str = "x"
    higher_is_better: bool = False
    detail: str = ""

    @property
    def verdict(self) -> str:
        if self.measured is None:
            return "n/a"
        ok = self.measured >= self.bound if self.higher_is_better else self.measured <= self.bound
        return "PASS" if ok else "MISS"


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".rstrip()


def ratio(a: Row | None, b: Row | None) -> float | None:
    if a is None or b is None or a.median is None or not b.median:
        return None
    return a.median / b.median


def render_section(section: Section) -> str:
    ref = section.ref()
    width = max([len(r.case) for r in section.rows] + [40])
    lines = [f"({section.key}) {section.title}", f"    x ref = {section.ref_says}"]
    head = f"    {'case':<{width}}  {'n':>5}  {'median':>12}  {'p90':>12}  {'x ref':>7}  note"
    lines += [head, "    " + "-" * (len(head) - 4 + 20)]
    for row in section.rows:
        if row.error is not None:
            lines.append(f"    {row.case:<{width}}  {'':>5}  {'-':>12}  {'-':>12}  {'-':>7}  ERROR: {row.error}")
            continue
        p90 = fmt(quantile(row.samples, 0.9), row.unit) if row.p90 and row.n >= 5 else "-"
        x = "ref" if row.ref else fmt(ratio(row, ref)) if ref is not None and row.compare else "-"
        note = row.note
        if len(row.rounds) > 1:
            spread = "/".join(fmt(v) for v in row.rounds)
            note = f"rounds {spread}" + (f"; {note}" if note else "")
        n = str(row.n) if row.n else ""
        lines.append(f"    {row.case:<{width}}  {n:>5}  {fmt(row.median, row.unit):>12}  {p90:>12}  {x:>7}  {note}")
    return "\n".join(lines)


def render_targets(targets: list[Target]) -> str:
    width = max([len(t.what) for t in targets] + [40])
    head = f"    {'target':<{width}}  {'measured':>12}  {'target':>12}  verdict  detail"
    lines = ["Targets", head, "    " + "-" * (len(head) - 4 + 20)]
    for t in targets:
        bound = ("≥ " if t.higher_is_better else "≤ ") + fmt(t.bound, t.unit)
        lines.append(f"    {t.what:<{width}}  {fmt(t.measured, t.unit):>12}  {bound:>12}  {t.verdict:<7}  {t.detail}")
    return "\n".join(lines)
