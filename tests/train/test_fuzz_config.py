"""Property-based: any combination of train's numeric flags is validated into a bounded,
finite config or refused with one clean ConfigError (exit 2), never another exception."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ddpnet.train.config import LIMITS, TrainConfig, validate
from tests.fuzzing import FUZZ, clean

_int = st.one_of(st.integers(-2, 5), st.integers(-2, 10**12))
_float = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 1e3))


@FUZZ
@given(st.builds(TrainConfig, width=_int, depth=_int, samples=_int, eval_samples=_int,
                 batch_size=_int, epochs=_int, grad_accum=_int,
                 max_steps=st.one_of(st.none(), _int), lr=_float, bucket_cap_mb=_float,
                 pg_timeout_s=_float, step_sleep_s=_float, keep_checkpoints=_int,
                 log_every=_int, monitor_interval_s=_float))
def test_train_config_is_bounded_or_refused(cfg: TrainConfig) -> None:
    ok = clean(validate, cfg, cuda_available=False)
    if ok is None:
        return
    for value in (ok.lr, ok.bucket_cap_mb, ok.pg_timeout_s, ok.step_sleep_s,
                  ok.monitor_interval_s):
        assert math.isfinite(value)
    assert ok.width <= LIMITS["--width"][1] and ok.samples <= LIMITS["--samples"][1]
    assert 1 <= ok.eval_samples <= LIMITS["--eval-samples"][1]


def test_nan_infinite_and_absurd_values_are_refused() -> None:
    # all accepted before: nan passes ``<= 0``; 1e300 s overflowed torch's timedelta later;
    # --width 10**9 allocated a model of 10**18 parameters; --eval-samples 0 was not checked
    for kwargs in ({"lr": math.nan}, {"lr": math.inf}, {"bucket_cap_mb": math.nan},
                   {"pg_timeout_s": 1e300}, {"pg_timeout_s": math.nan}, {"width": 10**9},
                   {"samples": 10**12}, {"eval_samples": 0}, {"step_sleep_s": math.inf}):
        assert clean(validate, TrainConfig(**kwargs), cuda_available=False) is None, kwargs
    assert validate(TrainConfig(width=16384, pg_timeout_s=86400), cuda_available=False)
