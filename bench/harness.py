"""The shared harness: A/B interleaving, ledgers, verdicts and the one-line report.

A figure compares agentrun (side A) with its reference (side B) on the same database:
A B A B A B, three repetitions each. Each side returns a `Sample` (items, seconds,
optional per-item latencies, and the correctness `Ledger` counted from the database
afterwards). The ratio is taken per repetition pair, so that slow drift of a shared
machine hits both sides of a pair alike:

- throughput figures: ratio = agentrun rate / reference rate;
- latency figures: ratio = reference latency / agentrun latency (> 1: agentrun is faster).

Verdict (issue 9): "ahead" when the median ratio is >= 1.1 and the worst repetition >= 1.0;
"parity" when the median is within 0.9-1.1; "behind" below; "invalid" when any sample
lost an item (a rate with anything lost is not a rate). A figure may carry the issue's
goal for that comparison (for example >= 0.25x the producer limit), checked on the median.

Running N threads of load for one side is `bench.worker_threads`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

REPETITIONS = 3


@dataclass
class Ledger:
    """What the database says happened: counted after the run, never from the timers."""

    expected: int = 0
    seen: int = 0
    duplicates: int = 0
    lost: int = 0
    order_violations: int = 0
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return self.lost == 0

    def merge(self, other: Ledger) -> Ledger:
        return Ledger(
            self.expected + other.expected,
            self.seen + other.seen,
            self.duplicates + other.duplicates,
            self.lost + other.lost,
            self.order_violations + other.order_violations,
            self.notes + other.notes,
            {**self.extra, **other.extra},
        )

    def summary(self) -> str:
        state = "ok" if self.valid and not (self.duplicates or self.order_violations) else "BAD"
        return (
            f"{state} (expected {self.expected}, seen {self.seen}, dup {self.duplicates}, "
            f"lost {self.lost}, order {self.order_violations})"
        )


@dataclass
class Sample:
    items: int
    seconds: float
    ledger: Ledger
    latencies_ms: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.items / self.seconds if self.seconds > 0 else 0.0

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "items": self.items,
            "seconds": round(self.seconds, 4),
            "rate": round(self.rate, 2),
            "ledger": {**asdict(self.ledger), "valid": self.ledger.valid},
            **self.extra,
        }
        if self.latencies_ms:
            out["latency_ms"] = {
                "p50": round(self.pct(50), 3),
                "p95": round(self.pct(95), 3),
                "p99": round(self.pct(99), 3),
                "max": round(max(self.latencies_ms), 3),
                "n": len(self.latencies_ms),
            }
        return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass
class Figure:
    """One comparison. `a` and `b` each produce one Sample per call."""

    key: str
    title: str
    a_name: str
    a: Callable[[], Sample]
    b_name: str
    b: Callable[[], Sample]
    params: dict[str, Any] = field(default_factory=dict)
    metric: str = "rate"  # "rate", or "p50" / "p95" / "p99" of the latencies
    unit: str = "items/s"
    goal: tuple[str, float] | None = None  # (">=", 1.0) or ("<=", 1.2), on the median ratio
    reference_kind: str = "peer"  # "peer", "limit" (a ceiling agentrun cannot beat) or "self"
    note: str = ""


@dataclass
class Outcome:
    figure: Figure
    a: list[Sample]
    b: list[Sample]
    ratios: list[float]
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None and all(s.ledger.valid for s in (*self.a, *self.b))

    @property
    def median_ratio(self) -> float:
        return statistics.median(self.ratios) if self.ratios else float("nan")

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        if not self.valid:
            return "invalid"
        return verdict(self.ratios)

    @property
    def goal_met(self) -> bool | None:
        goal = self.figure.goal
        if goal is None or not self.ratios:
            return None
        op, value = goal
        return self.median_ratio >= value if op == ">=" else self.median_ratio <= value

    def as_dict(self) -> dict[str, Any]:
        fig = self.figure
        return {
            "key": fig.key,
            "title": fig.title,
            "params": fig.params,
            "metric": fig.metric,
            "unit": fig.unit,
            "agentrun": {"name": fig.a_name, **side_summary(self.a, fig.metric)},
            "reference": {
                "name": fig.b_name,
                "kind": fig.reference_kind,
                **side_summary(self.b, fig.metric),
            },
            "ratio": {
                "median": round(self.median_ratio, 3) if self.ratios else None,
                "min": round(min(self.ratios), 3) if self.ratios else None,
                "max": round(max(self.ratios), 3) if self.ratios else None,
                "per_repetition": [round(r, 3) for r in self.ratios],
            },
            "verdict": self.verdict,
            "goal": list(fig.goal) if fig.goal else None,
            "goal_met": self.goal_met,
            "valid": self.valid,
            "error": self.error,
            "note": fig.note,
            "samples": {
                "agentrun": [s.as_dict() for s in self.a],
                "reference": [s.as_dict() for s in self.b],
            },
        }


def verdict(ratios: list[float]) -> str:
    median, worst = statistics.median(ratios), min(ratios)
    if median >= 1.1 and worst >= 1.0:
        return "ahead"
    if 0.9 <= median <= 1.1:
        return "parity"
    if median > 1.1:
        return "ahead-unconfirmed"  # the median is ahead but one repetition was not
    return "behind"


def value_of(sample: Sample, metric: str) -> float:
    """The figure: "rate", a latency percentile ("p50"), or "value" (a cell's own figure
    of merit, higher is better, kept in `extra["value"]`)."""
    if metric == "rate":
        return sample.rate
    if metric == "value":
        return float(sample.extra["value"])
    return sample.pct(float(metric[1:]))


def side_summary(samples: list[Sample], metric: str) -> dict[str, Any]:
    if not samples:
        return {}
    values = [value_of(s, metric) for s in samples]
    out: dict[str, Any] = {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
        "rate_median": round(statistics.median(s.rate for s in samples), 2),
    }
    if samples[0].latencies_ms and metric != "value":
        for q in (50, 95, 99):
            out[f"p{q}_ms_median"] = round(statistics.median(s.pct(q) for s in samples), 3)
    return out


def ratio_of(a: Sample, b: Sample, metric: str) -> float:
    va, vb = value_of(a, metric), value_of(b, metric)
    if metric in ("rate", "value"):
        return va / vb if vb > 0 else float("nan")
    return vb / va if va > 0 else float("nan")


def compare(figure: Figure, repetitions: int = REPETITIONS) -> Outcome:
    """Run A B A B A B and report; an exception becomes an `error` outcome, not a crash."""
    a: list[Sample] = []
    b: list[Sample] = []
    try:
        for _ in range(repetitions):
            a.append(figure.a())
            b.append(figure.b())
    except Exception as error:  # a broken side must not hide the other cells' results
        import traceback

        traceback.print_exc()
        return Outcome(figure, a, b, [], error=f"{type(error).__name__}: {error}")
    ratios = [ratio_of(x, y, figure.metric) for x, y in zip(a, b, strict=True)]
    outcome = Outcome(figure, a, b, ratios)
    print(format_line(outcome), flush=True)
    return outcome


def compare_many(figures: list[Figure], repetitions: int = REPETITIONS) -> list[Outcome]:
    """Several references against ONE agentrun side: A B C D A B C D A B C D.

    Every figure must share the same `a` callable (the first one's is used); each gets
    its own outcome, with ratios taken against the A sample of the same repetition.
    """
    a: list[Sample] = []
    refs: list[list[Sample]] = [[] for _ in figures]
    try:
        for _ in range(repetitions):
            a.append(figures[0].a())
            for index, figure in enumerate(figures):
                refs[index].append(figure.b())
    except Exception as error:
        import traceback

        traceback.print_exc()
        return [
            Outcome(f, a, r, [], error=f"{type(error).__name__}: {error}")
            for f, r in zip(figures, refs, strict=True)
        ]
    outcomes = []
    for figure, b in zip(figures, refs, strict=True):
        ratios = [ratio_of(x, y, figure.metric) for x, y in zip(a, b, strict=True)]
        outcome = Outcome(figure, a, b, ratios)
        print(format_line(outcome), flush=True)
        outcomes.append(outcome)
    return outcomes


def between_references(
    first: Outcome, second: Outcome, *, key: str, title: str, note: str
) -> Outcome:
    """The reference sides of two outcomes of one `compare_many` against each other
    (each pair measured in the same round, no extra run): evidence for a goal, so no
    goal of its own. Used where a reference is agentrun's own write set with nothing of
    agentrun around it: can that, at all, reach the peer on this machine?"""
    metric = first.figure.metric
    figure = Figure(
        key,
        title,
        first.figure.b_name,
        first.figure.b,
        second.figure.b_name,
        second.figure.b,
        params=first.figure.params,
        metric=metric,
        unit=first.figure.unit,
        reference_kind="peer",
        note=note,
    )
    ratios = [ratio_of(a, b, metric) for a, b in zip(first.b, second.b, strict=True)]
    outcome = Outcome(figure, first.b, second.b, ratios)
    print(format_line(outcome), flush=True)
    return outcome


def _fmt(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    if value >= 100:
        return f"{value:,.0f}"
    if value >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _side_text(name: str, samples: list[Sample], metric: str, unit: str) -> str:
    summary = side_summary(samples, metric)
    text = f"{name} {_fmt(summary['median'])} [{_fmt(summary['min'])}-{_fmt(summary['max'])}]"
    text += " ms" if metric not in ("rate", "value") else f" {unit}"
    if metric == "rate" and samples[0].latencies_ms:
        text += f" p50 {_fmt(summary['p50_ms_median'])} p99 {_fmt(summary['p99_ms_median'])} ms"
    elif metric not in ("rate", "value"):
        text += f" (p50 {_fmt(summary['p50_ms_median'])} p99 {_fmt(summary['p99_ms_median'])})"
    return text


def format_line(outcome: Outcome) -> str:
    fig = outcome.figure
    if outcome.error:
        return f"{fig.key:<26} ERROR {outcome.error}"
    metric_name = fig.metric if fig.metric in ("rate", "value") else f"{fig.metric} latency"
    ratios = outcome.ratios
    goal = ""
    if fig.goal:
        goal = f" goal {fig.goal[0]}{fig.goal[1]}: {'met' if outcome.goal_met else 'MISSED'}"
    ledgers = [s.ledger for s in (*outcome.a, *outcome.b)]
    ledger = (
        "ledger ok"
        if all(lg.valid and not lg.duplicates and not lg.order_violations for lg in ledgers)
        else "ledger " + "; ".join(lg.summary() for lg in ledgers if lg.summary()[:2] != "ok")
    )
    params = " ".join(f"{k}={v}" for k, v in fig.params.items())
    return (
        f"{fig.key:<26} {_side_text(fig.a_name, outcome.a, fig.metric, fig.unit)} | "
        f"{_side_text(fig.b_name, outcome.b, fig.metric, fig.unit)} | {metric_name} ratio "
        f"{_fmt(statistics.median(ratios))} [{_fmt(min(ratios))}-{_fmt(max(ratios))}] "
        f"{outcome.verdict}{goal} | {params} | {ledger}"
    )


@dataclass
class CellReport:
    """What a cell hands back: its figures, plus notes and data (query counts, profiles)."""

    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def note(self, text: str) -> None:
        print(f"  note: {text}", flush=True)
        self.notes.append(text)


@dataclass
class Scale:
    """How big a cell runs: `--quick` shrinks every cell to a smoke run."""

    quick: bool
    profile: bool = False

    def pick(self, quick: Any, full: Any) -> Any:
        return quick if self.quick else full

    @property
    def heavy_reps(self) -> int:
        """Repetitions for the cells that start worker processes: 3, or 1 under --quick
        (a smoke run; its verdicts rest on one pair)."""
        return 1 if self.quick else REPETITIONS
