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

# State machines draw their data while their rules run, so Hypothesis counts the time
# spent inside the store (SQLite file I/O, fsync) as generation time; on a loaded
# runner that trips `too_slow` although nothing about the data generation is slow.
_SLOW_STEPS = [HealthCheck.too_slow]

settings.register_profile(
    "dev",
    max_examples=30,
    stateful_step_count=25,
    suppress_health_check=_SLOW_STEPS,
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
    if os.environ.get("CI"):
        return "ci"
    return os.environ.get("HYPOTHESIS_PROFILE") or "dev"


settings.load_profile(_profile_name())
