/* Global Resolution's passes over the vocabulary (verispec.lp_analysis.luce_integrals and luce_solver), fused: one
 * loop over the tokens where the numpy route takes one pass a term.
 *
 * verispec.native.series compiles this file like kernels.c but WITHOUT -ffast-math's reassociation and WITH
 * -ffp-contract=off: every token's arithmetic is the numpy route's, operation for operation (the same products,
 * sums in the same order; the cluster and cell sums accumulate in token order as np.bincount does),
 * so the two routes agree to the last bit and the solver's decisions (Newton and chord step counts) do not move.
 *
 * verispec_series_locate: the cluster of each log weight u, index = clip(rint(u * scale) - first, 0, size - 1),
 *   and its offset u - centre[index] (the caller takes eps = expm1(offset) with numpy's expm1, whose SIMD
 *   implementation differs from libm's in the last bit on some CPUs).
 * verispec_series_moments: moments[k, c] += mass eps^k (k < terms) into `moments` [terms, size] (zeroed by the
 *   caller), in token order (summed cluster by cluster in a [size, terms] work array when the tokens are many).
 * verispec_series_evaluate: value = sum_k eps^k B[index, k] by Horner (B [size, terms], one row a cluster), and
 *   its derivative in log w, (eps + 1) d/deps, when `slope` is not NULL; then value = low + factor * weight * value
 *   when `weight` is not NULL (the chosen law q Phi(w) / q of the final pass); without a slope four tokens at a
 *   time (four independent chains, each token's operations unchanged).
 * verispec_grid_carry: the light tokens' grid cell k = clip(trunc((y - origin) / step), 1, points - 3), their
 *   theta = (y - point_k) / step and the cell moments sum q theta^j (j < 4) into `moments` [4, points] (zeroed).
 * verispec_hermite: u[light_i] = ((c3_k theta + c2_k) theta + s_k) theta + u_k at each light token's cell k. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

void verispec_series_locate(const double *restrict u, int64_t n, double scale, int64_t first, int64_t size,
                            const double *restrict centres, int64_t *restrict index, double *restrict offset) {
    for (int64_t i = 0; i < n; i++) {
        double r = rint(u[i] * scale);
        r = r >= -4e18 ? (r <= 4e18 ? r : 4e18) : -4e18; /* NaN and infinities: clipped to an end, as numpy does */
        int64_t c = (int64_t)r - first;
        c = c < 0 ? 0 : (c > size - 1 ? size - 1 : c);
        index[i] = c;
        offset[i] = u[i] - centres[c];
    }
}

void verispec_series_moments(const int64_t *restrict index, const double *restrict eps,
                             const double *restrict mass, int64_t n, int64_t size, int64_t terms,
                             double *restrict moments) {
    /* a cluster's terms side by side while summing (two cache lines a token, not `terms`), then laid out as
     * [terms, size]: each sum is the same additions in the same token order */
    double *work = n > 4 * size ? calloc((size_t)(size * terms), sizeof(double)) : 0;
    const int64_t row = work ? terms : 1, column = work ? 1 : size;
    double *restrict into = work ? work : moments;
    for (int64_t i = 0; i < n; i++) {
        double *restrict at = into + index[i] * row;
        const double e = eps[i];
        double power = mass[i];
        for (int64_t k = 0; k < terms; k++) {
            at[k * column] += power;
            power *= e;
        }
    }
    if (!work) return;
    for (int64_t c = 0; c < size; c++)
        for (int64_t k = 0; k < terms; k++) moments[k * size + c] += work[c * terms + k];
    free(work);
}

/* sum_k e^k row[k] by Horner, and (when slope is not NULL) its derivative in e by the same pass. */
static inline double series_at(const double *restrict row, int64_t terms, double e, double *restrict slope) {
    double v = row[terms - 1], s = 0.0;
    for (int64_t k = terms - 2; k >= 0; k--) {
        if (slope) {
            s *= e;
            s += v;
        }
        v *= e;
        v += row[k];
    }
    if (slope) *slope = s;
    return v;
}

/* Values only (no slope), four tokens at a time: four independent Horner chains, each the one-token arithmetic. */
static int64_t evaluate_four(const double *restrict coefficients, int64_t terms, const int64_t *restrict index,
                             const double *restrict eps, int64_t n, double *restrict value,
                             const double *restrict weight, double factor, double low) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const double *restrict r[4];
        double e[4], v[4];
        for (int j = 0; j < 4; j++) {
            r[j] = coefficients + index[i + j] * terms;
            e[j] = eps[i + j];
            v[j] = r[j][terms - 1];
        }
        for (int64_t k = terms - 2; k >= 0; k--)
            for (int j = 0; j < 4; j++) {
                v[j] *= e[j];
                v[j] += r[j][k];
            }
        for (int j = 0; j < 4; j++) {
            if (weight) {
                v[j] *= weight[i + j];
                v[j] *= factor;
                v[j] += low;
            }
            value[i + j] = v[j];
        }
    }
    return i;
}

void verispec_series_evaluate(const double *restrict coefficients, int64_t terms, const int64_t *restrict index,
                              const double *restrict eps, int64_t n, double *restrict value, double *restrict slope,
                              const double *restrict weight, double factor, double low) {
    const int64_t done = slope ? 0 : evaluate_four(coefficients, terms, index, eps, n, value, weight, factor, low);
    for (int64_t i = done; i < n; i++) {
        const double e = eps[i];
        double s = 0.0;
        double v = series_at(coefficients + index[i] * terms, terms, e, slope ? &s : 0);
        if (slope) slope[i] = s * (e + 1.0);
        if (weight) {
            v *= weight[i];
            v *= factor;
            v += low;
        }
        value[i] = v;
    }
}

void verispec_grid_carry(const double *restrict y, const double *restrict mass, const int64_t *restrict light,
                         int64_t n, const double *restrict points, int64_t count, double step,
                         int64_t *restrict cell, double *restrict theta, double *restrict moments) {
    const double origin = points[0];
    for (int64_t i = 0; i < n; i++) {
        const double yi = y[light[i]], qi = mass[light[i]];
        double scaled = yi - origin;
        scaled /= step;
        int64_t k = (int64_t)scaled;
        k = k < 1 ? 1 : (k > count - 3 ? count - 3 : k);
        double t = yi - points[k];
        t /= step;
        const double square = t * t, cube = square * t;
        cell[i] = k;
        theta[i] = t;
        moments[k] += qi;
        moments[count + k] += qi * t;
        moments[2 * count + k] += qi * square;
        moments[3 * count + k] += qi * cube;
    }
}

void verispec_hermite(const double *restrict cubic, const double *restrict square, const double *restrict slope,
                      const double *restrict point_u, const int64_t *restrict cell, const double *restrict theta,
                      const int64_t *restrict light, int64_t n, double *restrict u) {
    for (int64_t i = 0; i < n; i++) {
        const int64_t k = cell[i];
        const double t = theta[i];
        double v = cubic[k];
        v *= t;
        v += square[k];
        v *= t;
        v += slope[k];
        v *= t;
        v += point_u[k];
        u[light[i]] = v;
    }
}

/* Global Resolution's token classes (luce_solver._place_tokens): tiny (y < tiny_below), capped high (y = +inf, or
 * ratio = ratio_top when use_top), capped low (y = -inf and not tiny), solved (none of these) and, among the solved,
 * the heavy candidates (mass >= heavy); each written as increasing token indices, their counts in counts[5]. */
void verispec_token_classes(const double *restrict y, const double *restrict ratio, const double *restrict mass,
                            int64_t n, double tiny_below, int64_t use_top, double ratio_top, double heavy,
                            int64_t *restrict tiny, int64_t *restrict high, int64_t *restrict low,
                            int64_t *restrict solved, int64_t *restrict candidates, int64_t *restrict counts) {
    int64_t nt = 0, nh = 0, nl = 0, ns = 0, nc = 0;
    for (int64_t i = 0; i < n; i++) {
        const double v = y[i];
        const int is_tiny = v < tiny_below;
        const int is_high = v == INFINITY || (use_top && ratio[i] == ratio_top);
        const int is_low = v == -INFINITY && !is_tiny;
        tiny[nt] = i;
        nt += is_tiny;
        high[nh] = i;
        nh += is_high;
        low[nl] = i;
        nl += is_low;
        const int is_solved = !(is_tiny | is_high | is_low);
        solved[ns] = i;
        ns += is_solved;
        candidates[nc] = i;
        nc += is_solved && mass[i] >= heavy;
    }
    counts[0] = nt; counts[1] = nh; counts[2] = nl; counts[3] = ns; counts[4] = nc;
}

/* The binned program's measure (luce_solver._solve_binned): y clipped to [-60, 60], its bin
 * min(trunc((y - bottom) * scale), bins - 1) with bottom and scale from the clipped range (scale 0 when it is one
 * point), and the q and p mass of each bin summed in token order into bin_q, bin_p [bins] (zeroed). */
void verispec_bin_measure(const double *restrict y, const double *restrict mass, const double *restrict target,
                          int64_t n, int64_t bins, double *restrict bin_q, double *restrict bin_p) {
    double bottom = INFINITY, top = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        const double v = y[i] > -60.0 ? (y[i] < 60.0 ? y[i] : 60.0) : -60.0;
        bottom = v < bottom ? v : bottom;
        top = v > top ? v : top;
    }
    const double scale = top > bottom ? (double)bins / (top - bottom) : 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = y[i] > -60.0 ? (y[i] < 60.0 ? y[i] : 60.0) : -60.0;
        v -= bottom;
        v *= scale;
        int64_t b = (int64_t)v;
        b = b < bins - 1 ? b : bins - 1;
        bin_q[b] += mass[i];
        bin_p[b] += target[i];
    }
}

/* One safeguarded Newton step of luce_solver._ChordSteps.invert on the points' log weights u (the numpy route's
 * arithmetic element by element; the exponentials and logarithms stay numpy's, between the two calls).
 * verispec_curve_terms: J = value and dJ/du = slope at each located point (as verispec_series_evaluate), Phi - lo =
 *   chosen = (K w) J with w = e^u, and rest = max(span - chosen, floor) (np.maximum: NaN kept).
 * verispec_newton_step: from log(chosen) and log(rest), y = log chosen - log rest and dy/du = (1 + slope / value)
 *   span / rest; the bracket [low, high] of each root narrowed by u (np.where/np.minimum/np.maximum as the numpy
 *   route writes them), the Newton target u - (y - point) / (dy/du), or the bracket's midpoint when the target
 *   leaves it; u becomes the target. Returns 1 when every |target - u| < tolerance (a NaN is not), else 0. */
void verispec_curve_terms(const double *restrict coefficients, int64_t terms, const int64_t *restrict index,
                          const double *restrict eps, const double *restrict weight, int64_t n, double factor,
                          double span, double floor, double *restrict value, double *restrict slope,
                          double *restrict chosen, double *restrict rest) {
    for (int64_t i = 0; i < n; i++) {
        const double e = eps[i];
        double s = 0.0;
        const double v = series_at(coefficients + index[i] * terms, terms, e, &s);
        value[i] = v;
        slope[i] = s * (e + 1.0);
        double c = factor * weight[i];
        c *= v;
        chosen[i] = c;
        const double d = span - c;
        rest[i] = (d >= floor || isnan(d)) ? d : floor;
    }
}

int64_t verispec_newton_step(const double *restrict points, const double *restrict log_chosen,
                             const double *restrict log_rest, const double *restrict value,
                             const double *restrict slope, const double *restrict rest, double span, int64_t n,
                             double tolerance, double *restrict u, double *restrict low, double *restrict high) {
    int64_t done = 1;
    for (int64_t i = 0; i < n; i++) {
        const double current = log_chosen[i] - log_rest[i];
        double rate = 1.0 + slope[i] / value[i];
        rate *= span;
        rate /= rest[i];
        const double ui = u[i];
        double h = high[i], l = low[i];
        if (current > points[i]) {
            h = (isnan(h) || h < ui) ? h : ui;
        } else {
            l = (isnan(l) || l > ui) ? l : ui;
        }
        high[i] = h;
        low[i] = l;
        double target = ui - (current - points[i]) / rate;
        if (target < l || target > h) target = 0.5 * (l + h);
        done &= fabs(target - ui) < tolerance;
        u[i] = target;
    }
    return done;
}

/* The H* scan's buckets (global_resolution.optimal_split): bucket = min(trunc((log_ratio - low) * scale), count - 1)
 * of each token, and its q and p mass summed in token order into mass_q, mass_p [count] (zeroed), as numpy's
 * subtract, multiply, astype, minimum and two bincounts compute them. */
void verispec_scan_buckets(const double *restrict log_ratio, const double *restrict p, const double *restrict q,
                           int64_t n, double low, double scale, int64_t count, int64_t *restrict bucket,
                           double *restrict mass_q, double *restrict mass_p) {
    for (int64_t i = 0; i < n; i++) {
        double v = log_ratio[i] - low;
        v *= scale;
        int64_t b = (int64_t)v;
        b = b < count - 1 ? b : count - 1;
        bucket[i] = b;
        mass_q[b] += q[i];
        mass_p[b] += p[i];
    }
}

/* The grid's light tokens (luce_solver._place_tokens): the solved tokens [n] (increasing) without the heavy ones
 * [m] (increasing, a subset), written to light, and the least and largest y among them in extent[2] (NaN when one
 * is NaN, as numpy's min and max). Returns the number of light tokens. */
int64_t verispec_light_tokens(const int64_t *restrict solved, int64_t n, const int64_t *restrict heavy, int64_t m,
                              const double *restrict y, int64_t *restrict light, double *restrict extent) {
    int64_t count = 0, h = 0;
    double bottom = INFINITY, top = -INFINITY;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t token = solved[i];
        if (h < m && heavy[h] == token) {
            h++;
            continue;
        }
        light[count++] = token;
        const double v = y[token];
        nan |= isnan(v);
        bottom = v < bottom ? v : bottom;
        top = v > top ? v : top;
    }
    extent[0] = nan ? NAN : bottom;
    extent[1] = nan ? NAN : top;
    return count;
}

/* The logit y = log((r - lo) / (hi - r)) of the ratios (luce_integrals.ChoiceSystem.logit), around numpy's logs:
 * verispec_logit_parts writes r - lo into value and hi - r into rest; verispec_logit_finish, once both hold their
 * logs, value -= rest, then +inf where r >= hi and -inf where r <= lo (in that order, as the numpy route sets them). */
void verispec_logit_parts(const double *restrict ratio, int64_t n, double low, double high, double *restrict value,
                          double *restrict rest) {
    for (int64_t i = 0; i < n; i++) {
        value[i] = ratio[i] - low;
        rest[i] = high - ratio[i];
    }
}

void verispec_logit_finish(const double *restrict ratio, int64_t n, double low, double high, double *restrict value,
                           const double *restrict rest) {
    for (int64_t i = 0; i < n; i++) {
        double v = value[i] - rest[i];
        v = ratio[i] >= high ? INFINITY : v;
        value[i] = ratio[i] <= low ? -INFINITY : v;
    }
}

/* The expansion's node sums and coefficients read straight from its sequence [terms_all, span] of e^(-tau)
 * (-tau)^k / k! on the geometric tau grid (luce_integrals.Expansion), where the numpy route first copies it into
 * [nodes, terms, clusters] tables (5-10 MB a system): node l, cluster c reads sequence[k, refine l + c], and the
 * sequence (tens of kB) stays in cache. Each sum runs in the numpy route's order (np.add.reduce over the leading
 * axis of a C-contiguous array adds its rows one after another), so the two routes agree to the last bit; entries
 * that add an exact 0 (a cluster without mass, a node whose vector entry is 0) are skipped.
 * verispec_window_sums: out[l] = sum over (k, c) in that order of moments[k, c] sequence[k, refine l + c] (moments
 *   [terms, size]), read from `phases` [terms_all, refine, stride], phases[k, j, i] = sequence[k, refine i + j]:
 *   contiguous in l.
 * verispec_window_coefficients: out[c, k] = sum over l in order of vector[l] sequence[k, refine l + c] (out
 *   [size, terms]), 128 clusters at a time in `work` [terms, 128]. */
void verispec_window_sums(const double *restrict phases, int64_t stride, int64_t terms, int64_t size, int64_t nodes,
                          int64_t refine, const double *restrict moments, double *restrict out) {
    for (int64_t l = 0; l < nodes; l++) out[l] = 0.0;
    for (int64_t k = 0; k < terms; k++)
        for (int64_t c = 0; c < size; c++) {
            const double m = moments[k * size + c];
            if (m == 0.0) continue;
            const double *restrict s = phases + (k * refine + c % refine) * stride + c / refine;
            for (int64_t l = 0; l < nodes; l++) out[l] += m * s[l];
        }
}

void verispec_window_coefficients(const double *restrict sequence, int64_t span, int64_t terms, int64_t size,
                                  int64_t nodes, int64_t refine, const double *restrict vector, double *restrict work,
                                  double *restrict out) {
    for (int64_t from = 0; from < size; from += 128) {
        const int64_t width = size - from < 128 ? size - from : 128;
        for (int64_t i = 0; i < terms * width; i++) work[i] = 0.0;
        for (int64_t l = 0; l < nodes; l++) {
            const double a = vector[l];
            if (a == 0.0) continue;
            for (int64_t k = 0; k < terms; k++) {
                const double *restrict s = sequence + k * span + refine * l + from;
                double *restrict w = work + k * width;
                for (int64_t c = 0; c < width; c++) w[c] += a * s[c];
            }
        }
        for (int64_t c = 0; c < width; c++)
            for (int64_t k = 0; k < terms; k++) out[(from + c) * terms + k] = work[k * width + c];
    }
}

/* A node cache's key (verifiers.node_cache.node_key): NH, the universal hash of UMAC (Black, Halevi, Krawczyk,
 * Krovetz, Rogaway, CRYPTO 1999), in four Toeplitz-shifted instances: for the message's 32-bit words m and a random
 * key k (per process, as long as the longest message), instance j adds
 * ((m_2i + k_(2i+2j)) mod 2^32) ((m_(2i+1) + k_(2i+1+2j)) mod 2^32) mod 2^64 over the pairs i. Two different
 * messages of equal length collide in one instance with probability at most 2^-32 over the key, in all four at most
 * 2^-128 (Toeplitz extension, ibid.); `sums` [4] accumulates, so a message may come in pieces (each of even length,
 * the key advanced by the words before it). */
void verispec_nh_hash(const uint32_t *restrict words, int64_t n, const uint32_t *restrict key,
                      uint64_t *restrict sums) {
    uint64_t s0 = sums[0], s1 = sums[1], s2 = sums[2], s3 = sums[3];
    for (int64_t i = 0; i + 1 < n; i += 2) {
        const uint32_t a = words[i], b = words[i + 1];
        s0 += (uint64_t)(uint32_t)(a + key[i]) * (uint32_t)(b + key[i + 1]);
        s1 += (uint64_t)(uint32_t)(a + key[i + 2]) * (uint32_t)(b + key[i + 3]);
        s2 += (uint64_t)(uint32_t)(a + key[i + 4]) * (uint32_t)(b + key[i + 5]);
        s3 += (uint64_t)(uint32_t)(a + key[i + 6]) * (uint32_t)(b + key[i + 7]);
    }
    sums[0] = s0, sums[1] = s1, sums[2] = s2, sums[3] = s3;
}
