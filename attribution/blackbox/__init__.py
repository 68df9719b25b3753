"""Black-box recovery of multi-head attention from value queries (spec: specs/blackbox_heads.md).

Model: f(X) = sum_h v_h . X^T softmax(X W_h x_N); the learner sends token sequences and sees one
scalar. ``recover(oracle, H)`` returns the canonical heads (equal W_h merged, zero v_h dropped)
up to permutation with exactly 4 H d^2 - 2H + 1 queries of length <= 2H + 1, or
4 H0 d^2 - 2 H0 + 1 of length <= 2 H0 + 1 given only a bound H0 (and then the true count).

Modules: ``oracle`` (counting wrapper, random and exact reference oracles), ``rational`` (the
rational fits, in mpmath), ``recovery`` (the algorithm), ``canonical`` (canonical form,
comparison), ``noisy`` (noisy oracles, error-vs-noise sweep and plot), ``trained`` (an attention
layer of a TransformerLens toy model as the oracle), ``ffn`` (attention + bias-free ReLU FFN),
``run`` (one CLI run, packaged for the run store). Read README.md next to this file for the
numerics and the noise condition.

Numerics. Interpolating at k = 0..2H in the monomial basis in float64 loses digits fast
(measured: ~1e-4 for W and ~1e-2 for v at d = 6, H = 3 on a float64 oracle). The counted runs
add no queries; they (1) solve the same square systems in mpmath at ``dps`` digits, so the
algorithm adds no error of its own, (2) evaluate the random reference oracle exactly (mpmath)
so nothing is lost at all (errors ~1e-40), and (3) use random *orthogonal* query bases, so the
final solves W = U^{-T} L Q^{-1} do not amplify (cond(U) = cond(Q) = 1). ``oversample=o`` adds o
k values per experiment (least squares) and reports its own count, formula + o (2 d^2 - 1).

Noise condition (why the error stays within a constant multiple of s). With outputs
f + s * eps, the recovered parameters are a smooth function of the outputs wherever, in every
one of the 2 d^2 - 1 experiments,
  (a) the sampled rational function has exactly H' distinct poles with nonzero residues
      (distinct r_h, C_h != 0: true with probability one for random bases), so the
      interpolation system is nonsingular, and
  (b) s is below the breakdown level s*: the perturbed log-poles move by less than half the
      smallest gap between log-poles of that experiment (and of the sums used by the links),
      so the poles stay real and the head labels stay the same.
Then, by the implicit function theorem, max relative error <= K s + O(s^2) with
K = ||U^{-1}|| ||Q^{-1}|| max_experiments kappa_ij / min_h(||W_h||, ||v_h||), kappa_ij being the
condition number of experiment (i, j)'s interpolation (large when two heads' poles are close or
a residue is small). K depends on the model and on the queries, not on s. Measured
(results/blackbox/noise.md): K ~ 5e4-5e5 at d = 4, H = 2, so results are reliable (error < 1 %) up to
s ~ 1e-8 there; 1e-10 at d = 3, H = 2; float64 rounding only at d = 4, H = 3. Each result carries its
own error estimate (``error_estimate_W/v``, ``reliable``); a failure is a ``HeadCountError`` (H or the
bound below the truth) or a ``NoiseBreakdownError`` (noise above the breakdown level), told apart by a
few diagnostic queries on the failing experiment.
"""

from attribution.blackbox.canonical import HeadComparison, canonicalize, compare_heads
from attribution.blackbox.oracle import MHAParams, Oracle, OracleError, mha_oracle, random_mha
from attribution.blackbox.recovery import Recovery, expected_queries, recover

__all__ = ["HeadComparison", "MHAParams", "Oracle", "OracleError", "Recovery", "canonicalize",
           "compare_heads", "expected_queries", "mha_oracle", "random_mha", "recover"]
