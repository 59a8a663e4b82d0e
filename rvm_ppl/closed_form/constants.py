"""Control constants of the sequential fits (SparseBayes v2, Tipping & Faul 2003).

One home for the numbers the sequential driver, the compiled engine and the
sequential variational fit share.
"""

import math
import sys

# SparseBayes v2 control constants (Tipping & Faul 2003; SB2_ControlSettings).
ZERO_FACTOR = 1e-12  # q^2 - s at or below this counts as "irrelevant"
MIN_DELTA_LOG_ALPHA = 1e-3  # a re-estimate smaller than this proposes termination
MIN_DELTA_LOG_BETA = 1e-6  # a noise change larger than this vetoes termination
BETA_UPDATE_START = 10  # update the noise every iteration for this many ...
BETA_UPDATE_FREQUENCY = 5  # ... then every this many
BETA_MAX_FACTOR = 1e6  # beta <= BETA_MAX_FACTOR / var(t) (SparseBayes's BetaMaxFactor) ...
MIN_NOISE_VAR_RATIO = 1.0 / BETA_MAX_FACTOR  # ... i.e. noise variance >= this * var(t): the
# estimators' min_noise_var_ratio; 1 / (1 / 1e6) is 1e6 exactly, so the cap is the same number
ALIGNMENT_MAX = 1 - 1e-4  # cosine above which a candidate duplicates a basis in the model
# (SparseBayes uses 1 - 1e-3; with wide kernels, where most columns are that
# close, it blocked 290 of 455 candidates on Boston housing and stopped 90 nats
# below the optimum; see part C of benchmarks/bench_evidence.py).
GAUSSIAN_SNR_INIT = 0.1  # initial noise sd = 0.1 * std(t) (SparseBayes), see initial_noise_precision
INIT_ALPHA_MAX = 1e3  # initial alpha when the closed form is negative
NOISE_WARMUP_MAX = 25  # longest noise warm-up (iterations)
PREFETCH = 32  # cross products computed per pass over a lazy basis
PREFETCH_CHEAP = 1  # ... over a dense or low-rank basis, where a column costs the same alone
ADD_ORDER = 2 * PREFETCH  # best addable candidates a Decision lists
FIRST_EXACT = 4  # under a hyperprior, the candidates of largest bound that set the bar for the
# others': the engine finds their exact gains (engine._choose), the Python loop their lower
# bounds (evidence.prior_gains); the choice does not depend on it
SCALAR_MAX = 16  # exact gains under a hyperprior the Python loop finds one at a time; more, on
# arrays (evidence._exact_gains; the same numbers either way)
DRIFT_TOL = 1e-7  # relative drift of the updated S, Q that triggers a full recomputation
DRIFT_SAMPLE = 16  # random candidates checked for drift after every update (plus the model
# and the best candidates to add)
ENGINE_MAX_ENTRIES = 2001 * 2001  # largest N x M the compiled engine materialises (32 MB)
# Smallest N x M the compiled engine runs (exclusive): below it a whole fit in Python costs
# less than loading the engine into a process (Numba's runtime and cached code, 0.4-0.9 s),
# so those problems always run in Python. The choice depends on the problem's size only.
ENGINE_MIN_ENTRIES = 1001 * 1001
MULTISTART_MAX_N = 500  # largest N at which multistart="auto" runs the extra ascents
TRIVIAL_NOISE_SHARE = 0.95  # a fit whose noise variance is at least this share of var(t)
# ended at the empty or a near-empty model: it is climbed again from a smaller noise
POLISH_AFTER = 10  # consecutive re-estimations that start a joint Newton polish
POLISH_STEPS = 10  # Newton steps in one polish at most
POLISH_MAX_STEP = 2.0  # largest change of one log alpha (or log beta) in a Newton step
POLISH_GAIN = 1e-6  # predicted gain (nats) of a step below which a polish stops

ADD, REESTIMATE, DELETE = "add", "reestimate", "delete"


def initial_noise_precision(var_t):
    """The noise precision every Gaussian fit starts from: ``1 / (0.1 std(t))^2``.

    SparseBayes's assumed signal-to-noise ratio (``GAUSSIAN_SNR_INIT``); the
    standard deviation is floored at 1e-6 so that constant targets give a
    finite value.
    """
    return 1.0 / (GAUSSIAN_SNR_INIT * max(math.sqrt(var_t), 1e-6)) ** 2


def noise_precision_cap(var_t, min_noise_var_ratio=MIN_NOISE_VAR_RATIO):
    """The largest noise precision a Gaussian evidence fit may reach: ``1 / (ratio var(t))``.

    SparseBayes caps ``beta`` at ``BetaMaxFactor / var(t)`` (``BETA_MAX_FACTOR
    = 1e6``) so that noise-free targets do not drive the noise variance to
    zero; ``min_noise_var_ratio`` is that floor on the noise variance as a
    share of ``var(t)`` (default ``1e-6``, the same cap bit for bit). ``0``
    lifts it (``inf``). ``var(t)`` is floored at the smallest positive float.
    """
    if min_noise_var_ratio == 0:
        return math.inf
    return (1.0 / min_noise_var_ratio) / max(var_t, sys.float_info.min)


def check_noise_var_ratio(min_noise_var_ratio):
    """Return ``min_noise_var_ratio`` as a float, or raise a ValueError naming the problem."""
    if isinstance(min_noise_var_ratio, bool):
        raise TypeError("min_noise_var_ratio must be a real number in [0, 1); got a bool.")
    try:
        value = float(min_noise_var_ratio)
    except (TypeError, ValueError):
        raise TypeError(
            f"min_noise_var_ratio must be a real number in [0, 1); got {min_noise_var_ratio!r}."
        ) from None
    if not 0.0 <= value < 1.0:
        raise ValueError(
            "min_noise_var_ratio (the smallest noise variance as a share of var(y)) must be in "
            f"[0, 1); got {min_noise_var_ratio!r}."
        )
    return value
