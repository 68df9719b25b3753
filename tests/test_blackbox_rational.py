"""The rational fits on synthetic samples of c0 + sum C_h / (1 + r_h k)."""

import mpmath
from mpmath import mp

from attribution.blackbox.rational import fit_auto, fit_link, fit_main


def _g(c0, C, r):
    return lambda k: c0 + mpmath.fsum(Ch / (1 + rh * k) for Ch, rh in zip(C, r, strict=True))


def test_fit_main_recovers_poles_and_residues():
    with mp.workdps(40):
        c0 = mpmath.mpf("0.3")
        C, r = [mpmath.mpf("1.5"), mpmath.mpf("-0.7")], [mpmath.mpf("0.4"), mpmath.mpf(3)]
        g = _g(c0, C, r)
        ks = list(range(5))
        fit = fit_main(ks, [g(k) for k in ks], 2)
        pairs = sorted(zip(fit.r, fit.C, strict=True))
        assert abs(fit.c0 - c0) < 1e-30
        assert all(abs(a - b) < 1e-30 for (a, _), b in zip(pairs, sorted(r), strict=True))
        assert abs(pairs[0][1] - C[0]) < 1e-30 and abs(pairs[1][1] - C[1]) < 1e-30


def test_fit_link_uses_known_ends():
    with mp.workdps(40):
        c0, C, r = mpmath.mpf(1), [mpmath.mpf(2), mpmath.mpf(-1)], [mpmath.mpf("0.5"), mpmath.mpf(2)]
        g = _g(c0, C, r)
        ks = [1, 2, 3]  # 2H - 1 values; g(0) and g(inf) = c0 are given
        fit = fit_link(ks, [g(k) for k in ks], 2, c0, g(0))
        assert sorted(float(x) for x in fit.r) == [0.5, 2.0]
        assert fit.resid < 1e-30


def test_fit_auto_finds_the_number_of_poles():
    with mp.workdps(40):
        g = _g(mpmath.mpf(1), [mpmath.mpf(2)], [mpmath.mpf("0.7")])
        ks = list(range(9))  # room for 4 poles, only 1 present
        m, fit = fit_auto(ks, [g(k) for k in ks], 4, mpmath.mpf(10) ** -20)
        assert m == 1 and abs(fit.r[0] - mpmath.mpf("0.7")) < 1e-30
