# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A scaling law fitted to a sweep's finished members: L(x) = E + A * x^-alpha, where x is the model's
parameter count N (or the training compute C = 6 N D, D the tokens it saw), by least squares.

For a fixed alpha the law is linear in E and A, so each alpha has its best E and A in closed form;
alpha itself is found by a scan over a log-spaced grid, then narrowed by golden-section search
between the scan's neighbours. Its uncertainty is the standard error from the fit's Jacobian
(s^2 (J^T J)^-1, s^2 the residual variance over n - 3 degrees of freedom), which needs four sizes or
more. What makes a fit untrustworthy is said, never hidden: fewer sizes than that, losses that do not
fall with size, an exponent at the edge of the scan, a negative floor E. Plain Python: the
controller needs nothing more."""

from __future__ import annotations

import math

# the exponents scanned (log-spaced); a best alpha at either end is said
ALPHA_LOW, ALPHA_HIGH, SCAN = 0.005, 3.0, 400
# sizes needed to say anything of the fit's error (three parameters, one degree of freedom)
SIZES_FOR_ERROR = 4


def _line(xs, ys):
    """(E, A, rss) of the least-squares line y = E + A x."""
    n = float(len(xs))
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx <= 0:
        return mean_y, 0.0, sum((y - mean_y) ** 2 for y in ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx
    floor = mean_y - slope * mean_x
    return floor, slope, sum((y - floor - slope * x) ** 2 for x, y in zip(xs, ys))


def _at(alpha, sizes, losses):
    """(rss, E, A) of the best E and A at this alpha (x scaled by the smallest size, for precision)."""
    scale = min(sizes)
    floor, amplitude, rss = _line([(size / scale) ** -alpha for size in sizes], losses)
    return rss, floor, amplitude * scale ** alpha


def _invert3(m):
    """The inverse of a 3x3 matrix (lists), or None where it is singular."""
    a, b, c = m[0]
    d, e, f = m[1]
    g, h, i = m[2]
    det = a * (e * i - f * h) - b * (d * i - f * g) + c * (d * h - e * g)
    if abs(det) < 1e-300:
        return None
    return [[(e * i - f * h) / det, (c * h - b * i) / det, (b * f - c * e) / det],
            [(f * g - d * i) / det, (a * i - c * g) / det, (c * d - a * f) / det],
            [(d * h - e * g) / det, (b * g - a * h) / det, (a * e - b * d) / det]]


def fit(points):
    """points: [(size, loss)], one per size (the best loss of each) -> {E, A, alpha, alpha_err, rss,
    sizes, trusted, why}: why lists what makes the fit untrustworthy (trusted: none); None where no
    law can be fitted at all (fewer than three sizes, or a size or loss that is no positive number)."""
    points = sorted((float(size), float(loss)) for size, loss in points)
    if len(points) < 3 or any(not (size > 0 and math.isfinite(size) and math.isfinite(loss)) for size, loss in points):
        return None
    sizes, losses = [p[0] for p in points], [p[1] for p in points]
    ratio = (ALPHA_HIGH / ALPHA_LOW) ** (1.0 / (SCAN - 1))
    grid = [ALPHA_LOW * ratio ** k for k in range(SCAN)]
    scores = [_at(alpha, sizes, losses)[0] for alpha in grid]
    best = min(range(SCAN), key=lambda k: scores[k])
    low, high = grid[max(best - 1, 0)], grid[min(best + 1, SCAN - 1)]
    golden = (math.sqrt(5) - 1) / 2
    for _step in range(60):  # golden-section search in [low, high]
        left, right = high - golden * (high - low), low + golden * (high - low)
        if _at(left, sizes, losses)[0] <= _at(right, sizes, losses)[0]:
            high = right
        else:
            low = left
    alpha = (low + high) / 2
    rss, floor, amplitude = _at(alpha, sizes, losses)
    why = []
    if len(points) < SIZES_FOR_ERROR:
        why.append("%d sizes fit three parameters exactly: at least %d are needed to know the fit's error"
                   % (len(points), SIZES_FOR_ERROR))
    if any(later > earlier for earlier, later in zip(losses, losses[1:])):
        why.append("the loss does not fall with every larger size")
    if amplitude <= 0:
        why.append("the loss grows with size (A <= 0)")
    if best in (0, SCAN - 1):
        why.append("alpha is at the edge of the range searched (%g to %g)" % (ALPHA_LOW, ALPHA_HIGH))
    if floor < 0:
        why.append("the irreducible loss E comes out negative")
    alpha_err = None
    if len(points) >= SIZES_FOR_ERROR:
        # the Jacobian of E + A x^-alpha in (E, A, alpha)
        rows = [(1.0, size ** -alpha, -amplitude * size ** -alpha * math.log(size)) for size in sizes]
        jtj = [[sum(row[i] * row[j] for row in rows) for j in range(3)] for i in range(3)]
        inverse = _invert3(jtj)
        if inverse is not None and inverse[2][2] >= 0:
            alpha_err = math.sqrt(rss / (len(points) - 3) * inverse[2][2])
        else:
            why.append("the fit's error cannot be computed (the sizes do not tell E, A and alpha apart)")
    return dict(E=floor, A=amplitude, alpha=alpha, alpha_err=alpha_err, rss=rss, sizes=len(points),
                trusted=not why, why=why)


def predict(law, size):
    """The loss the law gives at size."""
    return law["E"] + law["A"] * float(size) ** -law["alpha"]


def best_per_size(members, key):
    """{size: the finished member with the lowest final loss at that size}, size = member[key] (its
    parameters, or its compute), for members that have both."""
    out = {}
    for member in members:
        size, loss = member.get(key), member.get("final_loss")
        if member.get("state") != "done" or not isinstance(size, (int, float)) or size <= 0 or \
                not isinstance(loss, (int, float)) or not math.isfinite(loss):
            continue
        if size not in out or loss < out[size]["final_loss"]:
            out[size] = member
    return out
