"""Control constants of the sequential fits (SparseBayes v2, Tipping & Faul 2003).

One home for the numbers the sequential driver, the compiled engine and the
sequential variational fit share.
"""

import math

# SparseBayes v2 control constants (Tipping & Faul 2003; SB2_ControlSettings).
ZERO_FACTOR = 1e-12  # q^2 - s at or below this counts as "irrelevant"
MIN_DELTA_LOG_ALPHA = 1e-3  # a re-estimate smaller than this proposes termination
MIN_DELTA_LOG_BETA = 1e-6  # a noise change larger than this vetoes termination
BETA_UPDATE_START = 10  # update the noise every iteration for this many ...
BETA_UPDATE_FREQUENCY = 5  # ... then every this many
BETA_MAX_FACTOR = 1e6  # beta <= BETA_MAX_FACTOR / var(t)
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
