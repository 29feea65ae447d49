"""Fuzzing profiles, the input counter and the hang guard (shared by tests/fuzz, tests/security, tests/load).

Profiles (environment variable `VRAMLENS_FUZZ`):
  ci    (default) derandomized, so every CI run tries the same inputs; about 20,000 inputs in all.
  long  random, 25x the inputs, failures kept in the hypothesis example database; `VRAMLENS_FUZZ_SCALE`
        multiplies the number of inputs further.
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("VRAMLENS_FUZZ", "ci")
_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.function_scoped_fixture,
        HealthCheck.large_base_example,
    ],
)
settings.register_profile("vramlens-ci", derandomize=True, database=None, **_COMMON)
settings.register_profile("vramlens-long", derandomize=False, **_COMMON)
SCALE = float(os.environ.get("VRAMLENS_FUZZ_SCALE", "1")) * (25 if PROFILE == "long" else 1)

# A single input that keeps the CPU busy this long is a hang (CPU time, not wall time: a loaded machine
# does not trip it).
HANG_CPU_S = float(os.environ.get("VRAMLENS_FUZZ_HANG_S", "10"))

COUNTS: dict[str, int] = {}


def fuzz_settings(examples: int) -> settings:
    """Hypothesis settings for a fuzz test that tries `examples` inputs in the CI profile."""
    parent = settings.get_profile("vramlens-long" if PROFILE == "long" else "vramlens-ci")
    return settings(parent, max_examples=max(1, int(examples * SCALE)))


def count(kind: str, n: int = 1) -> None:
    COUNTS[kind] = COUNTS.get(kind, 0) + n


class Hang(Exception):
    """An input kept the CPU busy for longer than HANG_CPU_S."""


@contextmanager
def hang_guard(what: str = "input", seconds: float = HANG_CPU_S):
    def on_alarm(signum, frame):
        raise Hang(f"{what}: still running after {seconds:.0f} s of CPU time")

    previous = signal.signal(signal.SIGPROF, on_alarm)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
