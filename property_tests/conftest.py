"""Hypothesis profiles for the property tests (the state machines and `@given` laws).

- `dev` (default): fast feedback while editing.
- `ci` (chosen whenever `CI` is set): derandomized, so a CI run is a pure function of
  the code; sized so the whole `property_tests/` directory stays within ~2-3 minutes
  on two cores. `print_blob` lets a CI failure be replayed locally with
  `@reproduce_failure`.
- `nightly` (`make soak`, or `HYPOTHESIS_PROFILE=nightly`): the long search.

`CI` wins over `HYPOTHESIS_PROFILE`, so a CI job cannot be slowed down (or weakened) by
a stray profile variable in its environment.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# `too_slow` is a timing check: on a shared, loaded runner it fails a test whose data
# generation is fine, so a derandomized CI result (or a night's soak) would depend on
# the machine's load. Rules of a state machine also draw data while they run, so time
# spent in a store (SQLite file I/O) counts as generation. `dev` keeps the check, where
# a genuinely slow strategy should be noticed. (Machines run through `.TestCase`
# suppress every health check themselves.)
_SLOW_STEPS = [HealthCheck.too_slow]

settings.register_profile(
    "dev",
    max_examples=30,
    stateful_step_count=25,
    # No per-example time limit: a deadline is a timing assertion, and on a loaded
    # machine it fails examples that are correct (performance lives in bench/).
    deadline=None,
)
settings.register_profile(
    "ci",
    derandomize=True,
    # Derandomized runs must not depend on what an earlier run left in the database.
    database=None,
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_STEPS,
)
settings.register_profile(
    "nightly",
    max_examples=10_000,
    stateful_step_count=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_STEPS,
)


def _profile_name() -> str:
    if "CI" in os.environ:
        return "ci"
    return os.environ.get("HYPOTHESIS_PROFILE") or "dev"


settings.load_profile(_profile_name())
