/* verispec's compiled kernels: single passes over a vocabulary-sized row where numpy and torch take several.
 *
 * verispec.native compiles this file on first use (with the machine's C compiler, for its own CPU) and calls it
 * through ctypes. Two kernels:
 *
 * verispec_logit_moments: the moments the delay selector's law features read from three rows of logits, in one
 * pass over the rows; verispec/selector/features.py says how the features follow from them (H(x) = L - x.y / T,
 * KL(p || q) = (x_p.y_p - x_p.y_q) / T - L_p + L_q, L1 = 2 - 2 sum min(p, q)).
 * For rows z_i [n] (i = p, q, r), y_i = z_i - max z_i, e_i = exp(y_i / T), s_i = sum e_i and x_i = e_i / s_i:
 *   out[0:3]  L_i = log s_i
 *   out[3:8]  x_p.y_p, x_q.y_q, x_r.y_r, x_p.y_q, x_q.y_p
 *   out[8]    sum_v min(x_p,v, x_q,v)
 *   out[9:12] min_v y_i,v (float32 arithmetic, as the numpy route's shifted rows hold it)
 *   where[0:3] the first argmax of each row, where[3:6] the first argmin.
 * Returns 0, or 1 (out untouched) when a logit is infinite or NaN.
 *
 * Each block of BLOCK entries is read from memory once: its maxima and minima, then (from the core's L1) the
 * exponentials relative to the block's maxima, the block's sums in float32 and the block maxima kept in [blocks, 11]
 * `stats`; the blocks' sums are put on the rows' global maxima in double at the end (e relative to the block maximum
 * m_b is e relative to the global maximum M times exp((m_b - M) / T), and y shifts by m_b - M). e_p and e_q stay in
 * `scratch` [2, n] (the core's L2 at Qwen's V) for the one sum that needs the totals first, sum min(x_p, x_q).
 * Three exponentials an entry, computed by exp_nonpositive (a polynomial the compiler vectorises), no libm call.
 *
 * verispec_largest: the k largest logits of a row and their ids from one pass (the top-k support of a sampling law,
 * verispec.models.sampling.largest). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 2048
#define STATS 11
/* fused multiply-add where the CPU has it (without, fmaf is a slow library call) */
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define MULADD(a, b, c) fmaf(a, b, c)
#else
#define MULADD(a, b, c) ((a) * (b) + (c))
#endif

#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif

/* exp(x) for x <= 0 in float32 (within 2 ulp), clamped at x = -87 (e^-87 = 1.6e-38, the least normal float32 is
 * 1.2e-38): x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, Cody and Waite), exp(r) by its Taylor series to
 * degree 6 (error below 2.3e-8 relative), times 2^k put into the exponent bits. */
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;
    float k = rintf(x * 1.44269504088896341f);
    float r = MULADD(k, -0.693145751953125f, x);
    r = MULADD(k, -1.428606765330187045e-06f, r);
    float p = 1.0f / 720.0f;
    p = MULADD(p, r, 1.0f / 120.0f);
    p = MULADD(p, r, 1.0f / 24.0f);
    p = MULADD(p, r, 1.0f / 6.0f);
    p = MULADD(p, r, 0.5f);
    p = MULADD(p, r, 1.0f);
    p = MULADD(p, r, 1.0f);
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

static int64_t first_index(const float *z, int64_t start, int64_t end, float value) {
    for (int64_t v = start; v < end; v++) {
        if (z[v] == value) return v;
    }
    return start;
}

/* LANES floats side by side (GCC's and Clang's vector extension): the compiler does not vectorise a running maximum
 * by itself without leave to ignore NaNs, which would let it drop the NaN check too. */
typedef float lanes_f __attribute__((vector_size(4 * LANES)));
typedef int32_t lanes_i __attribute__((vector_size(4 * LANES)));

static inline lanes_f pick(lanes_i mask, lanes_f yes, lanes_f no) {
    return (lanes_f)(((lanes_i)yes & mask) | ((lanes_i)no & ~mask));
}

/* The largest and the smallest entry of z[start:end); 0 when an entry is infinite or NaN (`total` is then NaN or
 * infinite; harmlessly also for logits near FLT_MAX). */
static int block_range(const float *restrict z, int64_t start, int64_t end, float *hi, float *lo) {
    lanes_f high, least, total = {0};
    for (int j = 0; j < LANES; j++) high[j] = least[j] = z[start];
    int64_t v = start;
    for (; v + LANES <= end; v += LANES) {
        lanes_f x;
        memcpy(&x, z + v, sizeof x);
        high = pick(x > high, x, high);
        least = pick(x < least, x, least);
        total += x;
    }
    float h = high[0], l = least[0], sum = 0;
    for (int j = 0; j < LANES; j++) {
        h = high[j] > h ? high[j] : h;
        l = least[j] < l ? least[j] : l;
        sum += total[j];
    }
    for (; v < end; v++) {
        h = z[v] > h ? z[v] : h;
        l = z[v] < l ? z[v] : l;
        sum += z[v];
    }
    *hi = h;
    *lo = l;
    return sum >= -FLT_MAX && sum <= FLT_MAX;
}

int verispec_logit_moments(const float *restrict zp, const float *restrict zq, const float *restrict zr, int64_t n,
                           double inv_t, float *restrict scratch, double *restrict stats, double *restrict out,
                           int64_t *restrict where) {
    const float *rows[3] = {zp, zq, zr};
    const float t = (float)inv_t;
    float top[3] = {zp[0], zq[0], zr[0]}, low[3] = {zp[0], zq[0], zr[0]};
    int64_t blocks = 0;
    for (int i = 0; i < 3; i++) where[i] = where[3 + i] = 0;
    for (int64_t start = 0; start < n; start += BLOCK, blocks++) {
        const int64_t end = start + BLOCK < n ? start + BLOCK : n;
        float high[3];
        for (int i = 0; i < 3; i++) {
            const float *z = rows[i];
            float hi, lo;
            if (!block_range(z, start, end, &hi, &lo)) return 1;
            if (hi > top[i] || start == 0) { top[i] = hi; where[i] = first_index(z, start, end, hi); }
            if (lo < low[i] || start == 0) { low[i] = lo; where[3 + i] = first_index(z, start, end, lo); }
            high[i] = hi;
        }
        const float mp = high[0], mq = high[1], mr = high[2];
        float sp = 0, sq = 0, sr = 0, app = 0, aqq = 0, arr = 0, apq = 0, aqp = 0;
        for (int64_t v = start; v < end; v++) {
            const float yp = zp[v] - mp, yq = zq[v] - mq, yr = zr[v] - mr;
            const float ep = exp_nonpositive(yp * t), eq = exp_nonpositive(yq * t), er = exp_nonpositive(yr * t);
            scratch[v] = ep;
            scratch[n + v] = eq;
            sp += ep; sq += eq; sr += er;
            app += ep * yp; aqq += eq * yq; arr += er * yr; apq += ep * yq; aqp += eq * yp;
        }
        double *row = stats + blocks * STATS;
        row[0] = mp; row[1] = mq; row[2] = mr;
        row[3] = sp; row[4] = sq; row[5] = sr;
        row[6] = app; row[7] = aqq; row[8] = arr; row[9] = apq; row[10] = aqp;
    }
    /* the blocks' sums on the global maxima: e relative to M is c_b e (c_b = exp((m_b - M) / T)), y is y_b + m_b - M */
    double s[3] = {0, 0, 0}, dots[5] = {0, 0, 0, 0, 0};
    for (int64_t b = 0; b < blocks; b++) {
        const double *row = stats + b * STATS;
        double shift[3], c[3];
        for (int i = 0; i < 3; i++) {
            shift[i] = row[i] - (double)top[i];
            c[i] = exp(shift[i] * inv_t);
            s[i] += c[i] * row[3 + i];
        }
        dots[0] += c[0] * (row[6] + shift[0] * row[3]);
        dots[1] += c[1] * (row[7] + shift[1] * row[4]);
        dots[2] += c[2] * (row[8] + shift[2] * row[5]);
        dots[3] += c[0] * (row[9] + shift[1] * row[3]);
        dots[4] += c[1] * (row[10] + shift[0] * row[4]);
    }
    double shared = 0;
    for (int64_t b = 0, start = 0; start < n; start += BLOCK, b++) {
        const int64_t end = start + BLOCK < n ? start + BLOCK : n;
        const double *row = stats + b * STATS;
        const float a = (float)(exp((row[0] - (double)top[0]) * inv_t) / s[0]);
        const float c = (float)(exp((row[1] - (double)top[1]) * inv_t) / s[1]);
        float least = 0;
        for (int64_t v = start; v < end; v++) {
            const float x = scratch[v] * a, y = scratch[n + v] * c;
            least += x < y ? x : y;
        }
        shared += least;
    }
    for (int i = 0; i < 3; i++) {
        out[i] = log(s[i]);
        out[9 + i] = (double)(low[i] - top[i]);
    }
    out[3] = dots[0] / s[0];
    out[4] = dots[1] / s[1];
    out[5] = dots[2] / s[2];
    out[6] = dots[3] / s[0];
    out[7] = dots[4] / s[1];
    out[8] = shared;
    return 0;
}

/* Insert (value, id) into `values`/`ids`, the `kept` largest so far in descending order (capacity `count`); the new
 * number kept. Equal values keep their arrival order. */
static int64_t keep_largest(float *restrict values, int64_t *restrict ids, int64_t kept, int64_t count, float value,
                            int64_t id) {
    if (kept == count && !(value > values[count - 1])) return kept;
    int64_t at = kept < count ? kept : count - 1;
    while (at > 0 && values[at - 1] < value) {
        values[at] = values[at - 1];
        ids[at] = ids[at - 1];
        at--;
    }
    values[at] = value;
    ids[at] = id;
    return kept < count ? kept + 1 : kept;
}

/* The `count` largest entries of z [n] (count <= n / width), largest first, and their ids, as torch.topk gives them
 * (equal entries may come with other ids): one pass over z for the maxima of its blocks of `width` entries (width a
 * multiple of LANES) into `block_max` [n / width + count] (its last `count` for the chosen blocks' maxima), the
 * `count` blocks with the largest maxima into `chosen` [count],
 * then the largest among their entries and the tail after the last whole block. Exact: a block holding one of the
 * `count` largest entries is chosen, or each chosen block has a maximum at least as large, so the candidates hold
 * `count` entries at least that large either way. Returns 0, or 1 (nothing written but block_max) when an entry
 * is infinite or NaN (torch's order for those is left to torch). */
int verispec_largest(const float *restrict z, int64_t n, int64_t count, int64_t width, float *restrict block_max,
                     int64_t *restrict chosen, float *restrict values, int64_t *restrict ids) {
    const int64_t blocks = n / width;
    lanes_f total = {0};
    for (int64_t b = 0; b < blocks; b++) {
        const float *row = z + b * width;
        lanes_f high;
        memcpy(&high, row, sizeof high);
        total += high;
        for (int64_t v = LANES; v + LANES <= width; v += LANES) {
            lanes_f x;
            memcpy(&x, row + v, sizeof x);
            high = pick(x > high, x, high);
            total += x;
        }
        float h = high[0];
        for (int j = 1; j < LANES; j++) h = high[j] > h ? high[j] : h;
        block_max[b] = h;
    }
    float sum = 0;
    for (int j = 0; j < LANES; j++) sum += total[j];
    for (int64_t v = blocks * width; v < n; v++) sum += z[v];
    if (!(sum >= -FLT_MAX && sum <= FLT_MAX)) return 1;
    float *maxima = block_max + blocks;  /* [count]: the chosen blocks' maxima */
    int64_t kept = 0;
    for (int64_t b = 0; b < blocks; b++) kept = keep_largest(maxima, chosen, kept, count, block_max[b], b);
    int64_t found = 0;
    for (int64_t c = 0; c < kept; c++) {
        const float *row = z + chosen[c] * width;
        for (int64_t v = 0; v < width; v++) {
            found = keep_largest(values, ids, found, count, row[v], chosen[c] * width + v);
        }
    }
    for (int64_t v = blocks * width; v < n; v++) found = keep_largest(values, ids, found, count, z[v], v);
    return 0;
}
