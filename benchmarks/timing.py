"""Shared by the micro-benchmarks: alternate variants, take medians, print a table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def alternate(
    variants: dict[str, Callable[[], None]], repeats: int, steps: int, warmup: int = 20
) -> dict[str, list[float]]:
    """Milliseconds per call of each variant: ``repeats`` rounds, each timing ``steps`` calls of every variant in turn.

    Alternating rounds spread a shared machine's noise over all variants alike.
    """
    for step in variants.values():
        for _ in range(warmup):
            step()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, step in variants.items():
            start = time.perf_counter()
            for _ in range(steps):
                step()
            times[name].append((time.perf_counter() - start) / steps * 1e3)
    return times


def print_table(times: dict[str, list[float]]) -> dict[str, float]:
    """Print median and range per variant as a markdown table; returns the medians."""
    medians = {name: statistics.median(t) for name, t in times.items()}
    print("| variant | median ms/step | range |\n| --- | --- | --- |")
    for name, t in times.items():
        print(f"| {name} | {medians[name]:.3f} | {min(t):.3f}-{max(t):.3f} |")
    return medians
