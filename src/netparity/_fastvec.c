/*
 * netparity._fastvec -- one-pass tensor statistics for CPU capture.
 *
 * Capture computes, for every recorded tensor, min, max, sum, sum of squares, sum of |x| and
 * the count of zeros.  NumPy needs one memory pass per statistic (five or six passes); on a
 * ResNet-50 step that is ~3 GB of activations and gradients read five times, which alone
 * doubles the step time.  This kernel reads each element once and keeps every accumulator in
 * vector registers: AVX-512 intrinsics where the CPU has them (see f32_body_512), else GCC
 * vector extensions compiled for AVX2 and for the baseline.  `stats_sum` does the same for the element-wise sum of several buffers without
 * writing the sum (a module's gradient w.r.t. an input that feeds several of its edges), and
 * `stats_relu` also accumulates what the statistics of max(x, 0) need (the sum and sum of
 * squares of the positive elements, the count of positive ones) in the same pass: the input
 * of an in-place ReLU describes its output too.  Those sums add the positive elements in the
 * lanes and order that a pass over max(x, 0) would, with zeros elsewhere, so they are the very
 * numbers such a pass gives.  `stats_sum(..., last=True)` also gives the last buffer's own
 * statistics from the same pass (the gradient through a ResNet block's conv1 is both that
 * conv's input gradient and the last contribution to the block's summed input gradient), and
 * `vec` turns the totals into the statistics vector in C (the Python version of that
 * arithmetic cost more than the pass itself on small tensors).
 *
 * Precision: float32 data is summed in float32 lanes in two levels -- BLOCK elements give 8
 * (AVX-512) or 16 (portable loop) additions per lane, SUPER / BLOCK block sums are added per
 * lane -- and every SUPER elements
 * the lanes go into float64 totals: a pairwise-like scheme with relative errors around 1e-7,
 * like NumPy's pairwise float32 sums.  float64 data is accumulated in float64.
 *
 * Non-finite values: the comparisons used for min/max ignore NaN, so the caller must check
 * the sums: any NaN or +-Inf makes `sum_sq` non-finite (so does a float32 square beyond
 * 3.4e38, which is harmless: such data is far outside float16 range anyway).  The Python side
 * then takes its exact, finite-masked path.
 *
 * Threads: a large buffer is split into `threads` parts at fixed points (so the result depends
 * only on the buffer and the thread count) whose totals are combined in order.  The parts run
 * either on POSIX threads started for the call, or -- after `bind_openmp()` -- as one parallel
 * region of the OpenMP runtime the framework already loaded (PyTorch's libgomp).  The second
 * way matters inside a training step: between operators that runtime's workers spin-wait on
 * the other cores, so extra POSIX threads fight them for the cores (measured: slower than one
 * thread), while the runtime's own team takes the work at once, as the framework's operators
 * do.  The runtime is reached through its stable GNU ABI entry `GOMP_parallel`, looked up in
 * the already-loaded library (dlopen RTLD_NOLOAD), so nothing is linked against it; a forked
 * child (other pid) falls back to the caller's thread.
 *
 * GNU C (GCC or Clang) and POSIX threads; with GCC on x86-64 Linux, `target_clones` builds
 * AVX2 and baseline versions of the portable loops and the AVX-512 loops are chosen at run
 * time (`__builtin_cpu_supports`).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#define LANES 32
#define BLOCK 256  /* float32 elements per inner block (8 additions per lane) */
#define SUPER 4096 /* elements per float64 flush (16 block sums per lane) */
#define MAX_PARTS 16
/* Software prefetch of the line PF_BYTES ahead of each read.  The hardware prefetchers stop at
 * every 4 KiB page, and a training step's tensors live on 4 KiB pages (torch does not ask for
 * huge ones), so without this each page starts with a stall; measured with
 * benchmarks/stats_kernel.py: two threads, cold data 22 -> 31 GB/s, hot 50 -> 58-64 GB/s, and
 * ~20 % less kernel time inside a ResNet-50 step.  A prefetch never faults, so reading ahead of
 * the end of a buffer is harmless. */
#define PF_BYTES 8192
#define PREFETCH_AHEAD(ptr) __builtin_prefetch((const char *)(ptr) + PF_BYTES, 0, 3)
#define MAX_SRC 8 /* buffers summed element by element by stats_sum */
/* smallest part worth a thread: waking an OpenMP team costs microseconds, starting a POSIX
 * thread tens of microseconds */
#define MIN_PART_OMP ((Py_ssize_t)1 << 15)
#define MIN_PART_PTHREAD ((Py_ssize_t)1 << 18)

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define NP_CLONES __attribute__((target_clones("avx2", "default")))
#define NP_AVX512 1 /* an intrinsics loop (below) for CPUs with AVX-512 */
#include <immintrin.h>
#else
#define NP_CLONES
#endif

typedef struct {
    const void *data;
    const float *more[MAX_SRC - 1]; /* float32 only: added to data element by element */
    int nmore;
    Py_ssize_t n;
    int is_double;
    double shift; /* statistics of x - shift (in x's precision) */
    double mn, mx, sum, sumsq, abssum;
    Py_ssize_t zeros;
    int relu;            /* float32 only: also the sums below */
    double psum, psumsq; /* sum and sum of squares of max(x, 0) */
    Py_ssize_t npos;     /* elements above zero */
    int last;            /* summed buffers only: also the totals of the last one alone */
    double lmn, lmx, lsum, lsumsq, labssum;
    Py_ssize_t lzeros;
} part_t;

static inline void set_totals(part_t *p, double mn, double mx, double sum, double sumsq,
                              double abssum, Py_ssize_t zeros)
{
    p->mn = mn;
    p->mx = mx;
    p->sum = sum;
    p->sumsq = sumsq;
    p->abssum = abssum;
    p->zeros = zeros;
}

/* one element into the totals (the tails after the vector loops); a float32 value compares
 * the same way after widening, so min/max stay exact */
static inline void add_scalar(part_t *p, double v)
{
    p->sum += v;
    p->sumsq += v * v;
    p->abssum += fabs(v);
    p->zeros += (v == 0.0);
    p->mn = v < p->mn ? v : p->mn;
    p->mx = v > p->mx ? v : p->mx;
}

/* 8 floats per vector: one AVX2 register (GCC splits them for SSE2).  Wider generic vectors
 * made GCC's AVX2 clone move every lane through memory -- ~2 GB/s, slower than NumPy. */
typedef float vf __attribute__((vector_size(32)));
typedef int vi __attribute__((vector_size(32)));
#define VW 8 /* floats per vector */
#define W512 16 /* floats per AVX-512 register */

/* Macros, not inline functions: a helper without the clone's target attribute could not be
 * inlined into the AVX-512/AVX2 clones and would pass vectors through memory. */
#define LOAD_VF(dst, p) memcpy(&(dst), (p), sizeof(vf)) /* unaligned load */
#define BLEND_VF(m, a, b) ((vf)(((vi)(a) & (m)) | ((vi)(b) & ~(m))))
/* two vectors of values into one accumulator set (sums, squares, |x|, zeros, min, max); the
 * same statement for the data and for the last summand of stats_sum(last), so both get the
 * same lanes and order */
#define ACCUM_VF(v0, v1, s0, s1, q0, q1, a0, a1, Z, mn0, mn1, mx0, mx1) \
    do {                                                                 \
        s0 += v0;                                                        \
        s1 += v1;                                                        \
        q0 += v0 * v0;                                                   \
        q1 += v1 * v1;                                                   \
        a0 += (vf)((vi)v0 & absmask);                                    \
        a1 += (vf)((vi)v1 & absmask);                                    \
        Z -= (v0 == 0.0f); /* comparisons give -1 where true */          \
        Z -= (v1 == 0.0f);                                               \
        mn0 = BLEND_VF(v0 < mn0, v0, mn0);                              \
        mn1 = BLEND_VF(v1 < mn1, v1, mn1);                              \
        mx0 = BLEND_VF(v0 > mx0, v0, mx0);                              \
        mx1 = BLEND_VF(v1 > mx1, v1, mx1);                              \
    } while (0)

/* float64 totals of a float32 pass (the lanes are flushed into them every SUPER elements) */
typedef struct {
    double sum, sumsq, abssum, psum, psumsq;
    Py_ssize_t zeros, npos;
} totals_t;

/* add one SUPER block's lanes (`lanes` each; counts as positive ints) into the totals */
static void flush_lanes(totals_t *t, const float *S, const float *Q, const float *A,
                        const int *Z, const float *PS, const float *PQ, const int *NP, int relu,
                        int lanes)
{
    for (int j = 0; j < lanes; j++) {
        t->sum += S[j];
        t->sumsq += Q[j];
        t->abssum += A[j];
        t->zeros += Z[j];
        if (relu) {
            t->psum += PS[j];
            t->psumsq += PQ[j];
            t->npos += NP[j];
        }
    }
}

/* the end of a float32 pass: reduce the min/max lanes (`mm`: 2 * lanes minima then
 * 2 * lanes maxima, starting from `first`, element 0), store the totals, and add the elements
 * from `i` on (the tail, shorter than SUPER) in float64 */
static void finish_f32(part_t *p, const float *mm, int lanes, float first, totals_t *t,
                       Py_ssize_t i, int nmore, int relu)
{
    const float *x = (const float *)p->data;
    const float shift = (float)p->shift;
    float fmn = first, fmx = first;
    for (int j = 0; j < 2 * lanes; j++) {
        fmn = mm[j] < fmn ? mm[j] : fmn;
        fmx = mm[2 * lanes + j] > fmx ? mm[2 * lanes + j] : fmx;
    }
    set_totals(p, fmn, fmx, t->sum, t->sumsq, t->abssum, t->zeros);
    for (; i < p->n; i++) {
        float e = x[i];
        for (int m = 0; m < nmore; m++)
            e += p->more[m][i];
        add_scalar(p, e - shift);
        if (relu) {
            double r = e > 0.0f ? e : 0.0;
            t->psum += r;
            t->psumsq += r * r;
            t->npos += e > 0.0f;
        }
    }
    p->psum = t->psum;
    p->psumsq = t->psumsq;
    p->npos = t->npos;
}

/* the end of the last summed buffer's own pass (see f32_body's `last`): the same reduction
 * and tail as a plain pass over that buffer, stored in p's l* fields */
static void finish_last(part_t *p, const float *mm, int lanes, totals_t *t, Py_ssize_t i)
{
    part_t q;
    memset(&q, 0, sizeof q);
    q.data = p->more[p->nmore - 1];
    q.n = p->n;
    finish_f32(&q, mm, lanes, ((const float *)q.data)[0], t, i, 0, 0);
    p->lmn = q.mn;
    p->lmx = q.mx;
    p->lsum = q.sum;
    p->lsumsq = q.sumsq;
    p->labssum = q.abssum;
    p->lzeros = q.zeros;
}

/* float32 statistics of data (+ more[0..nmore-1]), with the ReLU sums when `relu`; always
 * inlined into the entry points below, so each is compiled for constant nmore/relu and the
 * plain one keeps its tight loop */
static inline __attribute__((always_inline)) void f32_body(part_t *p, const int nmore,
                                                          const int relu, const int shifted,
                                                          const int last)
{
    const float *x = (const float *)p->data;
    const float *const *more = p->more;
    const Py_ssize_t n = p->n;
    totals_t tot = {0};
    Py_ssize_t i = 0;
    const vi absmask = (vi){0} + 0x7fffffff;
    const float shift = (float)p->shift;
    const vf sh = (vf){0} + shift;
    float x0 = x[0]; /* element 0 of the (summed) data */
    for (int m = 0; m < nmore; m++)
        x0 += more[m][0];
    vf mn0 = (vf){0} + (x0 - shift), mx0 = mn0, mn1 = mn0, mx1 = mn0;
    /* `last`: the last summed buffer's own statistics in the same lanes and order as a plain
     * pass over it (min/max in one register each: they do not depend on the order) */
    totals_t ltot = {0};
    const float *lx = last ? more[nmore - 1] : x;
    vf lmn = (vf){0} + lx[0], lmx = lmn;
    for (; i + SUPER <= n; i += SUPER) {
        /* float32 partial sums: BLOCK / (2 * VW) additions per lane within a block, then
         * SUPER / BLOCK additions of block sums, then the lanes go into float64 totals */
        vf S = {0}, Q = {0}, A = {0}, PS = {0}, PQ = {0}, LS = {0}, LQ = {0}, LA = {0};
        vi Z = {0}, NP = {0}, LZ = {0};
        for (int blk = 0; blk < SUPER; blk += BLOCK) {
            /* two independent accumulator sets hide the add latency */
            vf s0 = {0}, s1 = {0}, q0 = {0}, q1 = {0}, a0 = {0}, a1 = {0};
            vf p0 = {0}, p1 = {0}, pq0 = {0}, pq1 = {0};
            vf ls0 = {0}, ls1 = {0}, lq0 = {0}, lq1 = {0}, la0 = {0}, la1 = {0};
            const float *b = x + i + blk;
            for (int k = 0; k < BLOCK; k += 2 * VW) {
                vf v0, v1;
                PREFETCH_AHEAD(b + k); /* (one cache line per iteration) */
                LOAD_VF(v0, b + k);
                LOAD_VF(v1, b + k + VW);
                for (int m = 0; m < nmore; m++) { /* float32 additions in order, as torch */
                    vf t0, t1;
                    const float *o = more[m] + i + blk + k;
                    PREFETCH_AHEAD(o);
                    LOAD_VF(t0, o);
                    LOAD_VF(t1, o + VW);
                    v0 += t0;
                    v1 += t1;
                }
                if (shifted) {
                    v0 -= sh;
                    v1 -= sh;
                }
                ACCUM_VF(v0, v1, s0, s1, q0, q1, a0, a1, Z, mn0, mn1, mx0, mx1);
                if (last) { /* (reloaded: the loads above were just made, from L1) */
                    vf w0, w1;
                    LOAD_VF(w0, lx + i + blk + k);
                    LOAD_VF(w1, lx + i + blk + k + VW);
                    ACCUM_VF(w0, w1, ls0, ls1, lq0, lq1, la0, la1, LZ, lmn, lmn, lmx, lmx);
                }
                if (relu) {
                    const vi g0 = (v0 > 0.0f), g1 = (v1 > 0.0f);
                    vf r0 = (vf)((vi)v0 & g0), r1 = (vf)((vi)v1 & g1);
                    p0 += r0;
                    p1 += r1;
                    pq0 += r0 * r0;
                    pq1 += r1 * r1;
                    NP -= g0;
                    NP -= g1;
                }
            }
            S += s0 + s1;
            Q += q0 + q1;
            A += a0 + a1;
            if (relu) {
                PS += p0 + p1;
                PQ += pq0 + pq1;
            }
            if (last) {
                LS += ls0 + ls1;
                LQ += lq0 + lq1;
                LA += la0 + la1;
            }
        }
        flush_lanes(&tot, (const float *)&S, (const float *)&Q, (const float *)&A,
                    (const int *)&Z, (const float *)&PS, (const float *)&PQ, (const int *)&NP,
                    relu, VW);
        if (last)
            flush_lanes(&ltot, (const float *)&LS, (const float *)&LQ, (const float *)&LA,
                        (const int *)&LZ, NULL, NULL, NULL, 0, VW);
    }
    vf mm[4] = {mn0, mn1, mx0, mx1};
    finish_f32(p, (const float *)mm, VW, x0 - shift, &tot, i, nmore, relu);
    if (last) {
        vf lmm[4] = {lmn, lmn, lmx, lmx};
        finish_last(p, (const float *)lmm, VW, &ltot, i);
    }
}

NP_CLONES
static void stats_f32(part_t *p)
{
    f32_body(p, 0, 0, 0, 0);
}

NP_CLONES
static void stats_f32_shifted(part_t *p)
{
    f32_body(p, 0, 0, 1, 0);
}

NP_CLONES
static void stats_f32_relu(part_t *p)
{
    f32_body(p, 0, 1, 0, 0);
}

NP_CLONES
static void stats_f32_sum(part_t *p)
{
    f32_body(p, p->nmore, 0, 1, 0);
}

NP_CLONES
static void stats_f32_sum_last(part_t *p)
{
    f32_body(p, p->nmore, 0, 1, 1);
}

#ifdef NP_AVX512
/* The same loop written with AVX-512 intrinsics: min/max as one instruction each (vminps /
 * vmaxps, which treat NaN like the comparisons above) and the zero count as a compare into a
 * mask plus a masked subtraction -- 8 vector instructions per 16 elements instead of the 12
 * GCC makes of the portable loop.  On data in the caches the kernel is bound by instructions,
 * so this is what makes it faster there (measured: benchmarks/stats_kernel.py); on data beyond
 * them the prefetch (PREFETCH_AHEAD) matters more.  Same lanes, same order, same fused
 * multiply-add: the same numbers. */
/* ACCUM_VF in AVX-512 intrinsics (`zero` and `one` in scope) */
#define ACCUM_512(v0, v1, s0, s1, q0, q1, a0, a1, Z, mn0, mn1, mx0, mx1)                  \
    do {                                                                                  \
        s0 = _mm512_add_ps(s0, v0);                                                       \
        s1 = _mm512_add_ps(s1, v1);                                                       \
        q0 = _mm512_fmadd_ps(v0, v0, q0);                                                 \
        q1 = _mm512_fmadd_ps(v1, v1, q1);                                                 \
        a0 = _mm512_add_ps(a0, _mm512_abs_ps(v0));                                        \
        a1 = _mm512_add_ps(a1, _mm512_abs_ps(v1));                                        \
        Z = _mm512_mask_add_epi32(Z, _mm512_cmp_ps_mask(v0, zero, _CMP_EQ_OQ), Z, one);   \
        Z = _mm512_mask_add_epi32(Z, _mm512_cmp_ps_mask(v1, zero, _CMP_EQ_OQ), Z, one);   \
        mn0 = _mm512_min_ps(v0, mn0);                                                     \
        mn1 = _mm512_min_ps(v1, mn1);                                                     \
        mx0 = _mm512_max_ps(v0, mx0);                                                     \
        mx1 = _mm512_max_ps(v1, mx1);                                                     \
    } while (0)

static inline __attribute__((always_inline, target("avx512f"))) void
f32_body_512(part_t *p, const int nmore, const int relu, const int shifted, const int last)
{
    const float *x = (const float *)p->data;
    const float *const *more = p->more;
    const Py_ssize_t n = p->n;
    totals_t tot = {0};
    Py_ssize_t i = 0;
    const float shift = (float)p->shift;
    const __m512 sh = _mm512_set1_ps(shift), zero = _mm512_setzero_ps();
    const __m512i one = _mm512_set1_epi32(1);
    float x0 = x[0];
    for (int m = 0; m < nmore; m++)
        x0 += more[m][0];
    __m512 mn0 = _mm512_set1_ps(x0 - shift), mx0 = mn0, mn1 = mn0, mx1 = mn0;
    totals_t ltot = {0};
    const float *lx = last ? more[nmore - 1] : x;
    __m512 lmn = _mm512_set1_ps(lx[0]), lmx = lmn;
    for (; i + SUPER <= n; i += SUPER) {
        __m512 S = zero, Q = zero, A = zero, PS = zero, PQ = zero, LS = zero, LQ = zero,
               LA = zero;
        __m512i Z = _mm512_setzero_si512(), NP = _mm512_setzero_si512(),
                LZ = _mm512_setzero_si512();
        for (int blk = 0; blk < SUPER; blk += BLOCK) {
            __m512 s0 = zero, s1 = zero, q0 = zero, q1 = zero, a0 = zero, a1 = zero;
            __m512 p0 = zero, p1 = zero, pq0 = zero, pq1 = zero;
            __m512 ls0 = zero, ls1 = zero, lq0 = zero, lq1 = zero, la0 = zero, la1 = zero;
            const float *b = x + i + blk;
            for (int k = 0; k < BLOCK; k += 2 * W512) {
                PREFETCH_AHEAD(b + k);
                PREFETCH_AHEAD(b + k + W512);
                __m512 v0 = _mm512_loadu_ps(b + k), v1 = _mm512_loadu_ps(b + k + W512);
                for (int m = 0; m < nmore; m++) {
                    const float *o = more[m] + i + blk + k;
                    PREFETCH_AHEAD(o);
                    PREFETCH_AHEAD(o + W512);
                    v0 = _mm512_add_ps(v0, _mm512_loadu_ps(o));
                    v1 = _mm512_add_ps(v1, _mm512_loadu_ps(o + W512));
                }
                if (shifted) {
                    v0 = _mm512_sub_ps(v0, sh);
                    v1 = _mm512_sub_ps(v1, sh);
                }
                ACCUM_512(v0, v1, s0, s1, q0, q1, a0, a1, Z, mn0, mn1, mx0, mx1);
                if (last) {
                    const float *o = lx + i + blk + k;
                    __m512 w0 = _mm512_loadu_ps(o), w1 = _mm512_loadu_ps(o + W512);
                    ACCUM_512(w0, w1, ls0, ls1, lq0, lq1, la0, la1, LZ, lmn, lmn, lmx, lmx);
                }
                if (relu) {
                    /* max(x, 0) added as x where x > 0 and nothing elsewhere: the same sums
                     * as adding +0 there, like the portable loop (the sums start at +0) */
                    const __mmask16 g0 = _mm512_cmp_ps_mask(v0, zero, _CMP_GT_OQ);
                    const __mmask16 g1 = _mm512_cmp_ps_mask(v1, zero, _CMP_GT_OQ);
                    p0 = _mm512_mask_add_ps(p0, g0, p0, v0);
                    p1 = _mm512_mask_add_ps(p1, g1, p1, v1);
                    pq0 = _mm512_mask3_fmadd_ps(v0, v0, pq0, g0);
                    pq1 = _mm512_mask3_fmadd_ps(v1, v1, pq1, g1);
                    NP = _mm512_mask_add_epi32(NP, g0, NP, one);
                    NP = _mm512_mask_add_epi32(NP, g1, NP, one);
                }
            }
            S = _mm512_add_ps(S, _mm512_add_ps(s0, s1));
            Q = _mm512_add_ps(Q, _mm512_add_ps(q0, q1));
            A = _mm512_add_ps(A, _mm512_add_ps(a0, a1));
            if (relu) {
                PS = _mm512_add_ps(PS, _mm512_add_ps(p0, p1));
                PQ = _mm512_add_ps(PQ, _mm512_add_ps(pq0, pq1));
            }
            if (last) {
                LS = _mm512_add_ps(LS, _mm512_add_ps(ls0, ls1));
                LQ = _mm512_add_ps(LQ, _mm512_add_ps(lq0, lq1));
                LA = _mm512_add_ps(LA, _mm512_add_ps(la0, la1));
            }
        }
        float fs[W512], fq[W512], fa[W512], fps[W512], fpq[W512];
        int iz[W512], inp[W512];
        _mm512_storeu_ps(fs, S);
        _mm512_storeu_ps(fq, Q);
        _mm512_storeu_ps(fa, A);
        _mm512_storeu_si512(iz, Z);
        if (relu) {
            _mm512_storeu_ps(fps, PS);
            _mm512_storeu_ps(fpq, PQ);
            _mm512_storeu_si512(inp, NP);
        }
        flush_lanes(&tot, fs, fq, fa, iz, fps, fpq, inp, relu, W512);
        if (last) {
            _mm512_storeu_ps(fs, LS);
            _mm512_storeu_ps(fq, LQ);
            _mm512_storeu_ps(fa, LA);
            _mm512_storeu_si512(iz, LZ);
            flush_lanes(&ltot, fs, fq, fa, iz, NULL, NULL, NULL, 0, W512);
        }
    }
    float mm[4 * W512];
    _mm512_storeu_ps(mm, mn0);
    _mm512_storeu_ps(mm + W512, mn1);
    _mm512_storeu_ps(mm + 2 * W512, mx0);
    _mm512_storeu_ps(mm + 3 * W512, mx1);
    finish_f32(p, mm, W512, x0 - shift, &tot, i, nmore, relu);
    if (last) {
        float lmm[4 * W512];
        _mm512_storeu_ps(lmm, lmn);
        _mm512_storeu_ps(lmm + W512, lmn);
        _mm512_storeu_ps(lmm + 2 * W512, lmx);
        _mm512_storeu_ps(lmm + 3 * W512, lmx);
        finish_last(p, lmm, W512, &ltot, i);
    }
}

__attribute__((target("avx512f"))) static void stats_f32_512(part_t *p)
{
    f32_body_512(p, 0, 0, 0, 0);
}

__attribute__((target("avx512f"))) static void stats_f32_shifted_512(part_t *p)
{
    f32_body_512(p, 0, 0, 1, 0);
}

__attribute__((target("avx512f"))) static void stats_f32_relu_512(part_t *p)
{
    f32_body_512(p, 0, 1, 0, 0);
}

__attribute__((target("avx512f"))) static void stats_f32_sum_512(part_t *p)
{
    f32_body_512(p, p->nmore, 0, 1, 0);
}

__attribute__((target("avx512f"))) static void stats_f32_sum_last_512(part_t *p)
{
    f32_body_512(p, p->nmore, 0, 1, 1);
}

static int have_avx512 = -1;
#endif

NP_CLONES
static void stats_f64(part_t *p)
{
    const double *x = (const double *)p->data;
    const Py_ssize_t n = p->n;
    double mn[LANES / 2], mx[LANES / 2], s[LANES / 2] = {0}, q[LANES / 2] = {0},
           a[LANES / 2] = {0};
    Py_ssize_t z[LANES / 2] = {0};
    Py_ssize_t i = 0;
    const int L = LANES / 2;
    const double shift = p->shift;
    for (int j = 0; j < L; j++) {
        mn[j] = x[0] - shift;
        mx[j] = x[0] - shift;
    }
    for (; i + L <= n; i += L) {
        PREFETCH_AHEAD(x + i);
        PREFETCH_AHEAD(x + i + L / 2);
        for (int j = 0; j < L; j++) {
            double v = x[i + j] - shift;
            s[j] += v;
            q[j] += v * v;
            a[j] += fabs(v);
            z[j] += (v == 0.0);
            mn[j] = v < mn[j] ? v : mn[j];
            mx[j] = v > mx[j] ? v : mx[j];
        }
    }
    double sum = 0.0, sumsq = 0.0, abssum = 0.0, fmn = mn[0], fmx = mx[0];
    Py_ssize_t zeros = 0;
    for (int j = 0; j < L; j++) {
        sum += s[j];
        sumsq += q[j];
        abssum += a[j];
        zeros += z[j];
        fmn = mn[j] < fmn ? mn[j] : fmn;
        fmx = mx[j] > fmx ? mx[j] : fmx;
    }
    set_totals(p, fmn, fmx, sum, sumsq, abssum, zeros);
    for (; i < n; i++)
        add_scalar(p, x[i] - shift);
}

typedef void (*body_fn)(part_t *);
/* the float32 loops by variant: summed buffers, ReLU sums, shifted, plain, summed buffers
 * with the last one's own totals */
static const body_fn f32_loops[5] = {stats_f32_sum, stats_f32_relu, stats_f32_shifted, stats_f32,
                                     stats_f32_sum_last};
#ifdef NP_AVX512
static const body_fn f32_loops_512[5] = {stats_f32_sum_512, stats_f32_relu_512,
                                         stats_f32_shifted_512, stats_f32_512,
                                         stats_f32_sum_last_512};
#endif

static void run_part(part_t *p)
{
    if (p->is_double) {
        stats_f64(p);
        return;
    }
    const body_fn *loops = f32_loops;
#ifdef NP_AVX512
    if (have_avx512 < 0)
        have_avx512 = __builtin_cpu_supports("avx512f") ? 1 : 0;
    if (have_avx512)
        loops = f32_loops_512;
#endif
    loops[p->nmore > 0 ? (p->last ? 4 : 0) : p->relu ? 1 : p->shift != 0.0 ? 2 : 3](p);
}

static void *thread_main(void *arg)
{
    run_part((part_t *)arg);
    return NULL;
}

/* ---- the framework's OpenMP runtime (see the header comment) ---- */
typedef void (*gomp_parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
typedef int (*omp_int_fn)(void);
static gomp_parallel_fn omp_parallel = NULL;
static omp_int_fn omp_thread_num = NULL, omp_num_threads = NULL;
static pid_t omp_pid = 0;
static char omp_path[4096];

typedef struct {
    part_t *parts;
    int nparts;
} team_job_t;

static void team_body(void *arg)
{
    team_job_t *job = (team_job_t *)arg;
    int team = omp_num_threads();
    for (int k = omp_thread_num(); k < job->nparts; k += team > 0 ? team : job->nparts)
        run_part(&job->parts[k]);
}

typedef struct {
    const char *prefer;
    char best[4096];
    int best_preferred;
} find_t;

static int is_openmp_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    return strncmp(base, "libgomp", 7) == 0 || strncmp(base, "libiomp5", 8) == 0 ||
           strncmp(base, "libomp.", 7) == 0 || strncmp(base, "libomp-", 7) == 0;
}

static int find_openmp(struct dl_phdr_info *info, size_t size, void *arg)
{
    find_t *f = (find_t *)arg;
    (void)size;
    if (info->dlpi_name == NULL || !is_openmp_name(info->dlpi_name))
        return 0;
    int preferred = f->prefer[0] != '\0' && strstr(info->dlpi_name, f->prefer) != NULL;
    if (f->best[0] == '\0' || (preferred && !f->best_preferred)) {
        snprintf(f->best, sizeof(f->best), "%s", info->dlpi_name);
        f->best_preferred = preferred;
    }
    return 0;
}

/* bind_openmp(prefer="") -> path or None: use the loaded OpenMP runtime (one whose path
 * contains `prefer` first) for threads >= 2; None (and unbound) when none is loaded */
static PyObject *fastvec_bind_openmp(PyObject *self, PyObject *args)
{
    const char *prefer = "";
    (void)self;
    if (!PyArg_ParseTuple(args, "|s", &prefer))
        return NULL;
    find_t f;
    memset(&f, 0, sizeof(f));
    f.prefer = prefer;
    dl_iterate_phdr(find_openmp, &f);
    omp_parallel = NULL;
    omp_path[0] = '\0';
    if (f.best[0] == '\0')
        Py_RETURN_NONE;
    void *h = dlopen(f.best, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        Py_RETURN_NONE;
    gomp_parallel_fn par = (gomp_parallel_fn)dlsym(h, "GOMP_parallel");
    omp_int_fn num = (omp_int_fn)dlsym(h, "omp_get_thread_num");
    omp_int_fn team = (omp_int_fn)dlsym(h, "omp_get_num_threads");
    /* the handle stays open: the library was loaded by the framework and stays anyway */
    if (par == NULL || num == NULL || team == NULL)
        Py_RETURN_NONE;
    omp_thread_num = num;
    omp_num_threads = team;
    omp_parallel = par;
    omp_pid = getpid();
    snprintf(omp_path, sizeof(omp_path), "%s", f.best);
    return PyUnicode_DecodeFSDefault(omp_path);
}

static PyObject *fastvec_unbind_openmp(PyObject *self, PyObject *args)
{
    (void)self;
    (void)args;
    omp_parallel = NULL;
    omp_path[0] = '\0';
    Py_RETURN_NONE;
}

static gomp_parallel_fn bound_team(void)
{
    return omp_parallel != NULL && omp_pid == getpid() ? omp_parallel : NULL;
}

/* split n elements of buf (+ more[0..nmore-1], float32) into up to `threads` parts at fixed
 * points -- nparts - 1 parts of `each` elements (a multiple of SUPER), the rest in the last --
 * so that a buffer's totals depend only on the buffer, the thread count and whether a team is
 * bound; returns the number of parts written to `parts` */
static int plan_parts(part_t *parts, const void *buf, const float *const *more, int nmore,
                      Py_ssize_t n, int is_double, int threads, double shift, int relu, int team)
{
    Py_ssize_t min_part = team ? MIN_PART_OMP : MIN_PART_PTHREAD;
    int nparts = threads;
    if (n / min_part < nparts)
        nparts = (int)(n / min_part);
    if (nparts < 1)
        nparts = 1;
    memset(parts, 0, sizeof(part_t) * (size_t)nparts);
    const Py_ssize_t itemsize = is_double ? 8 : 4;
    Py_ssize_t each = nparts > 1 ? (n / nparts / SUPER) * SUPER : n;
    for (int k = 0; k < nparts; k++) {
        Py_ssize_t start = each * k;
        parts[k].data = (const char *)buf + start * itemsize;
        parts[k].nmore = nmore;
        for (int m = 0; m < nmore; m++)
            parts[k].more[m] = more[m] + start;
        parts[k].n = k == nparts - 1 ? n - start : each;
        parts[k].is_double = is_double;
        parts[k].shift = shift;
        parts[k].relu = relu;
    }
    return nparts;
}

/* add part q's six totals named P##mn .. P##zeros into r's (P empty: the data's; P = l: the
 * last summand's) */
#define MERGE_TOTALS(r, q, P)                                  \
    do {                                                       \
        (r).P##mn = (q).P##mn < (r).P##mn ? (q).P##mn : (r).P##mn; \
        (r).P##mx = (q).P##mx > (r).P##mx ? (q).P##mx : (r).P##mx; \
        (r).P##sum += (q).P##sum;                              \
        (r).P##sumsq += (q).P##sumsq;                          \
        (r).P##abssum += (q).P##abssum;                        \
        (r).P##zeros += (q).P##zeros;                          \
    } while (0)

/* one buffer's totals from its parts, combined in order */
static part_t combine_parts(const part_t *parts, int nparts)
{
    part_t r = parts[0];
    for (int k = 1; k < nparts; k++) {
        MERGE_TOTALS(r, parts[k], );
        r.psum += parts[k].psum;
        r.psumsq += parts[k].psumsq;
        r.npos += parts[k].npos;
        MERGE_TOTALS(r, parts[k], l);
    }
    return r;
}

/* the statistics of n elements of buf (+ more[0..nmore-1], float32) - shift, split into up to
 * `threads` parts; runs without the GIL */
static part_t run_stats(const void *buf, const float *const *more, int nmore, Py_ssize_t n,
                        int is_double, int threads, double shift, int relu, int last)
{
    gomp_parallel_fn par = bound_team();
    part_t parts[MAX_PARTS];
    int nparts = plan_parts(parts, buf, more, nmore, n, is_double, threads, shift, relu,
                            par != NULL);
    for (int k = 0; k < nparts; k++)
        parts[k].last = last && nmore > 0;
    Py_BEGIN_ALLOW_THREADS
    if (nparts == 1) {
        run_part(&parts[0]);
    } else if (par != NULL) {
        team_job_t job = {parts, nparts};
        par(team_body, &job, (unsigned)nparts, 0);
    } else {
        pthread_t tid[MAX_PARTS];
        int spawned[MAX_PARTS] = {0};
        for (int k = 1; k < nparts; k++)
            spawned[k] = pthread_create(&tid[k], NULL, thread_main, &parts[k]) == 0;
        run_part(&parts[0]);
        for (int k = 1; k < nparts; k++) {
            if (spawned[k])
                pthread_join(tid[k], NULL);
            else
                run_part(&parts[k]);
        }
    }
    Py_END_ALLOW_THREADS
    return combine_parts(parts, nparts);
}

/* many buffers' parts, taken by the team's threads one at a time */
typedef struct {
    part_t *parts;
    int nparts;
    int next;
} many_job_t;

static void many_body(void *arg)
{
    many_job_t *job = (many_job_t *)arg;
    int k;
    while ((k = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED)) < job->nparts)
        run_part(&job->parts[k]);
}

static PyObject *totals_tuple(const part_t *r)
{
    return Py_BuildValue("dddddn", r->mn, r->mx, r->sum, r->sumsq, r->abssum, r->zeros);
}

static int check_threads(int threads)
{
    if (threads < 1 || threads > MAX_PARTS) {
        PyErr_Format(PyExc_ValueError, "fastvec: threads must be 1..%d", MAX_PARTS);
        return -1;
    }
    return 0;
}

/* the buffer's element type: 0 float32, 1 float64, -1 (TypeError set) otherwise */
static int float_kind(const Py_buffer *view)
{
    if (view->format != NULL && strcmp(view->format, "f") == 0 && view->itemsize == 4)
        return 0;
    if (view->format != NULL && strcmp(view->format, "d") == 0 && view->itemsize == 8)
        return 1;
    PyErr_SetString(PyExc_TypeError, "fastvec: buffer must hold float32 or float64");
    return -1;
}

/* stats(buffer, threads, shift) -> (min, max, sum, sum_sq, abs_sum, zeros) of buffer - shift
 *
 * `buffer`: a C-contiguous buffer of format 'f' (float32) or 'd' (float64) with at least one
 * element.  `threads` (1..16): a large buffer is split into that many parts at fixed points
 * (multiples of SUPER), so the result is deterministic for a given count; the parts run on the
 * bound OpenMP runtime's team (`bind_openmp`) or on POSIX threads.  `shift` (default 0) is
 * subtracted from every element first, in the buffer's precision: a second call with the mean
 * gives the sum of squared deviations without cancellation and without a temporary array. */
/* The arguments of the one-buffer entry points, (buffer, threads) or, with `fmt` "O|id",
 * (buffer, threads, shift): fills `view` (the caller releases it) and `is_double`, returns the
 * element count (>= 1), or -1 with an exception set (nothing to release).  `name` is the
 * entry point's for messages; `float32_only` refuses float64. */
static Py_ssize_t one_buffer(PyObject *args, const char *fmt, const char *name,
                             int float32_only, Py_buffer *view, int *threads, double *shift,
                             int *is_double)
{
    PyObject *obj;
    if (!PyArg_ParseTuple(args, fmt, &obj, threads, shift) || check_threads(*threads) < 0)
        return -1;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    *is_double = float_kind(view);
    Py_ssize_t n = *is_double < 0 ? 0 : view->len / view->itemsize;
    if (*is_double == 1 && float32_only)
        PyErr_Format(PyExc_TypeError, "fastvec.%s: buffer must hold float32", name);
    else if (*is_double >= 0 && n < 1)
        PyErr_Format(PyExc_ValueError, "fastvec.%s: empty buffer", name);
    if (*is_double < 0 || (*is_double == 1 && float32_only) || n < 1) {
        PyBuffer_Release(view);
        return -1;
    }
    return n;
}

static PyObject *vec_of_totals(const part_t *r, const void *buf, Py_ssize_t n, int is_double,
                               int threads);

/* stats() (totals) or vec() (the statistics vector) of one buffer */
static PyObject *one_pass(PyObject *args, int vec)
{
    int threads = 1, is_double = 0;
    double shift = 0.0;
    Py_buffer view;
    Py_ssize_t n = one_buffer(args, vec ? "O|i" : "O|id", vec ? "vec" : "stats", 0, &view,
                              &threads, &shift, &is_double);
    if (n < 0)
        return NULL;
    part_t r = run_stats(view.buf, NULL, 0, n, is_double, threads, shift, 0, 0);
    PyObject *res = vec ? vec_of_totals(&r, view.buf, n, is_double, threads) : totals_tuple(&r);
    PyBuffer_Release(&view);
    return res;
}

static PyObject *fastvec_stats(PyObject *self, PyObject *args)
{
    (void)self;
    return one_pass(args, 0);
}

/* vec(buffer, threads) -> the 12-number statistics vector of netparity.hoststats.finite_vec
 * (min, max, mean, std, norm, abs_sum, nan, posinf, neginf, zeros, fp16_overflow, finite
 * count), or None when the buffer holds NaN/Inf or values beyond float16's range (those take
 * the exact, masked path).  hoststats._vec's arithmetic, in the same order, so the same
 * numbers -- without its Python calls, which cost more than this pass on small tensors.  A
 * variance dominated by the mean takes a second pass around the mean rounded to the buffer's
 * precision. */
#define FP16_MAX_D 65504.0
static PyObject *vec_of_totals(const part_t *r, const void *buf, Py_ssize_t n, int is_double,
                               int threads)
{
    if (!isfinite(r->sumsq) || !(r->mn >= -FP16_MAX_D && r->mx <= FP16_MAX_D))
        Py_RETURN_NONE;
    const double dn = (double)n;
    const double mean = r->sum / dn;
    double var = r->sumsq / dn - mean * mean;
    if (mean * mean > 10.0 * var) {
        double shift = is_double ? mean : (double)(float)mean;
        part_t d = run_stats(buf, NULL, 0, n, is_double, threads, shift, 0, 0);
        var = (d.sumsq - d.sum * d.sum / dn) / dn;
    }
    /* (max(v, 0.0) as Python computes it: v unless 0.0 > v) */
    return Py_BuildValue("[ddddddiiinin]", r->mn, r->mx, mean, sqrt(0.0 > var ? 0.0 : var),
                         sqrt(0.0 > r->sumsq ? 0.0 : r->sumsq), r->abssum, 0, 0, 0, r->zeros, 0,
                         n);
}

static PyObject *fastvec_vec(PyObject *self, PyObject *args)
{
    (void)self;
    return one_pass(args, 1);
}

/* stats_relu(buffer, threads) -> stats() of a float32 buffer followed by (sum, sum_sq) of
 * max(x, 0) and the count of x > 0: with min/max clamped at 0 and n minus that count as the
 * zeros (data without NaN), the totals of max(x, 0) from the same pass */
static PyObject *fastvec_stats_relu(PyObject *self, PyObject *args)
{
    int threads = 1, is_double = 0;
    double shift = 0.0;
    Py_buffer view;
    (void)self;
    Py_ssize_t n = one_buffer(args, "O|i", "stats_relu", 1, &view, &threads, &shift,
                              &is_double);
    if (n < 0)
        return NULL;
    part_t r = run_stats(view.buf, NULL, 0, n, 0, threads, 0.0, 1, 0);
    PyBuffer_Release(&view);
    return Py_BuildValue("dddddnddn", r.mn, r.mx, r.sum, r.sumsq, r.abssum, r.zeros, r.psum,
                         r.psumsq, r.npos);
}

/* stats_many(buffers, threads, vectors) -> [stats(b, threads) for b in buffers], the same
 * numbers, in one call: every buffer's parts run in one parallel region of the bound team
 * (small buffers side by side), without a Python call per buffer.  Non-empty C-contiguous
 * float32/float64 buffers.  With `vectors` true, [vec(b, threads) for b in buffers]. */
static PyObject *fastvec_stats_many(PyObject *self, PyObject *args)
{
    PyObject *seq_obj;
    int threads = 1, vectors = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O|ip", &seq_obj, &threads, &vectors)
        || check_threads(threads) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(seq_obj, "fastvec.stats_many: buffers must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    Py_buffer *views = PyMem_Calloc((size_t)k + 1, sizeof(Py_buffer));
    part_t *parts = PyMem_Calloc((size_t)k * (size_t)threads + 1, sizeof(part_t));
    int *first = PyMem_Calloc((size_t)k + 1, sizeof(int));
    PyObject *res = NULL;
    Py_ssize_t got = 0;
    if (views == NULL || parts == NULL || first == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    gomp_parallel_fn par = bound_team();
    int total = 0;
    for (; got < k; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got],
                               PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto done;
        int is_double = float_kind(&views[got]);
        Py_ssize_t n = is_double < 0 ? 0 : views[got].len / views[got].itemsize;
        if (is_double >= 0 && n < 1)
            PyErr_SetString(PyExc_ValueError, "fastvec.stats_many: empty buffer");
        if (is_double < 0 || n < 1) {
            got++;
            goto done;
        }
        first[got] = total;
        total += plan_parts(parts + total, views[got].buf, NULL, 0, n, is_double, threads, 0.0,
                            0, par != NULL);
    }
    first[k] = total;
    Py_BEGIN_ALLOW_THREADS
    if (par != NULL && threads > 1 && total > 1) {
        many_job_t job = {parts, total, 0};
        par(many_body, &job, (unsigned)threads, 0);
    } else {
        for (int j = 0; j < total; j++)
            run_part(&parts[j]);
    }
    Py_END_ALLOW_THREADS
    res = PyList_New(k);
    for (Py_ssize_t i = 0; res != NULL && i < k; i++) {
        part_t r = combine_parts(parts + first[i], first[i + 1] - first[i]);
        PyObject *t = vectors ? vec_of_totals(&r, views[i].buf, views[i].len / views[i].itemsize,
                                              parts[first[i]].is_double, threads)
                              : totals_tuple(&r);
        if (t == NULL) {
            Py_CLEAR(res);
            break;
        }
        PyList_SET_ITEM(res, i, t);
    }
done:
    for (Py_ssize_t m = 0; m < got; m++)
        PyBuffer_Release(&views[m]);
    PyMem_Free(views);
    PyMem_Free(parts);
    PyMem_Free(first);
    Py_DECREF(seq);
    return res;
}

/* stats_sum(buffers, threads, shift, last): stats() of buffers[0] + buffers[1] + ... added
 * element by element in float32, left to right (what torch computes for the same sum), without
 * materialising the sum.  2..MAX_SRC non-empty float32 buffers of one length.  With `last`
 * true, 12 numbers: those, then stats(buffers[-1], threads) -- the same numbers as that call
 * (same parts, lanes and order) -- from the same pass. */
static PyObject *fastvec_stats_sum(PyObject *self, PyObject *args)
{
    PyObject *seq_obj;
    int threads = 1, last = 0;
    double shift = 0.0;
    (void)self;
    if (!PyArg_ParseTuple(args, "O|idp", &seq_obj, &threads, &shift, &last)
        || check_threads(threads) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(seq_obj, "fastvec.stats_sum: buffers must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (k < 2 || k > MAX_SRC) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "fastvec.stats_sum: 2..%d buffers", MAX_SRC);
        return NULL;
    }
    Py_buffer views[MAX_SRC];
    Py_ssize_t got = 0, n = 0;
    int ok = 1;
    for (; got < k; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, got), &views[got],
                               PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
            ok = 0;
            break;
        }
        if (float_kind(&views[got]) != 0) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_TypeError, "fastvec.stats_sum: buffers must hold float32");
            }
            got++;
            ok = 0;
            break;
        }
        Py_ssize_t len = views[got].len / 4;
        if (got == 0)
            n = len;
        if (len != n || len < 1) {
            PyErr_SetString(PyExc_ValueError,
                            "fastvec.stats_sum: buffers must be non-empty and of one length");
            got++;
            ok = 0;
            break;
        }
    }
    PyObject *res = NULL;
    if (ok) {
        const float *more[MAX_SRC - 1];
        for (Py_ssize_t m = 1; m < k; m++)
            more[m - 1] = (const float *)views[m].buf;
        part_t r = run_stats(views[0].buf, more, (int)(k - 1), n, 0, threads, shift, 0, last);
        res = last ? Py_BuildValue("dddddndddddn", r.mn, r.mx, r.sum, r.sumsq, r.abssum, r.zeros,
                                   r.lmn, r.lmx, r.lsum, r.lsumsq, r.labssum, r.lzeros)
                   : totals_tuple(&r);
    }
    for (Py_ssize_t m = 0; m < got; m++)
        PyBuffer_Release(&views[m]);
    Py_DECREF(seq);
    return res;
}

/* use_avx512(flag=None) -> bool: whether the AVX-512 loops run (they do where the CPU has
 * AVX-512F); flag False makes the portable loops run instead -- for tests of those loops on
 * an AVX-512 machine -- and True goes back (where supported). */
static PyObject *fastvec_use_avx512(PyObject *self, PyObject *args)
{
    PyObject *flag = Py_None;
    (void)self;
    if (!PyArg_ParseTuple(args, "|O", &flag))
        return NULL;
#ifdef NP_AVX512
    int supported = __builtin_cpu_supports("avx512f") ? 1 : 0;
    if (flag != Py_None) {
        int want = PyObject_IsTrue(flag);
        if (want < 0)
            return NULL;
        have_avx512 = want && supported;
    } else if (have_avx512 < 0) {
        have_avx512 = supported;
    }
    return PyBool_FromLong(have_avx512);
#else
    Py_RETURN_FALSE;
#endif
}

/* ---------------------------------------------------------------------------------------------
 * pair_update: the error metrics of one tensor pair (netparity.compare.metrics), fused.
 *
 * The comparison reads two payloads chunk by chunk and needs, per pair: max/sum/sum of squares
 * of d = |c - r|, the dot products r.r, c.c, r.c, the relative error d / max(|r|, scale) (max
 * and sum), max(d - rtol*|r|), the count of d - rtol*|r| <= atol, max((d - atol) / |r|) over
 * d > atol, a 2-D log histogram of a strided sample of (d, |r|), and the NaN/Inf bookkeeping.
 * NumPy needs about twenty passes and several float64 temporaries per chunk for that (~25 ns
 * per element); this reads each element once, straight from the stored bits (float64,
 * float32, float16 or bfloat16 on either side, decoded exactly), in float64.
 *
 * Same numbers as the NumPy pass (compare/metrics.py `_accumulate`, the reference kept for
 * other dtypes and tested against this): maxima, counts and the histogram exactly (the
 * element-wise arithmetic is the same IEEE float64 operations, contraction into FMA off);
 * the sums (sum_d, squares, dots, sum_rel) differ only in summation order (4 lanes per block
 * here, NumPy's pairwise sum and BLAS there): relative differences ~1e-16.
 *
 * The histogram sample follows the NumPy pass exactly: chunks of `chunk` elements (global
 * positions), in each the finite pairs numbered from 0 and every `stride`-th one taken from
 * offset (chunk index % stride) -- 0 for a chunk of at most `stride` elements.
 * ------------------------------------------------------------------------------------------- */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

enum { PK_F64 = 0, PK_F32 = 1, PK_F16 = 2, PK_BF16 = 3 };
enum { PD_SUM_D, PD_MAX_D, PD_SS_D, PD_AA, PD_BB, PD_AB, PD_SUM_REL, PD_MAX_REL, PD_EXCESS,
       PD_NEED, PD_N };
enum { PI_N, PI_WITHIN, PI_NAN_MM, PI_INF_MM, PI_NF_MATCH, PI_SAMPLED, PI_LO, PI_HI, PI_N_ };
#define PAIR_BLOCK 64
#define PAIR_FLUSH 64 /* blocks per flush of the block sums */
#define PAIR_NBINS ((Py_ssize_t)1 << 17) /* (1 << 9) d bins x (1 << 8) r bins */

static inline double half_to_double(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t bits;
    float f;
    if (ex == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (ex == 0) {
        f = (float)man * 5.9604644775390625e-08f; /* man * 2**-24: exact */
        return sign ? -(double)f : (double)f;
    } else {
        bits = sign | ((ex + 112u) << 23) | (man << 13);
    }
    memcpy(&f, &bits, 4);
    return (double)f;
}

static inline double load_value(const void *p, int kind, Py_ssize_t i)
{
    switch (kind) {
    case PK_F64:
        return ((const double *)p)[i];
    case PK_F32:
        return (double)((const float *)p)[i];
    case PK_F16:
        return half_to_double(((const uint16_t *)p)[i]);
    default: {
        uint32_t bits = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &bits, 4);
        return (double)f;
    }
    }
}

static inline void load_block(double *dst, const void *p, int kind, Py_ssize_t at, int n)
{
    if (kind == PK_F32) {
        const float *s = (const float *)p + at;
        for (int j = 0; j < n; j++)
            dst[j] = (double)s[j];
    } else if (kind == PK_F64) {
        memcpy(dst, (const double *)p + at, (size_t)n * sizeof(double));
    } else {
        for (int j = 0; j < n; j++)
            dst[j] = load_value(p, kind, at + j);
    }
}

static inline int32_t hist_bin(double d, double r)
{
    float d32 = (float)d, r32 = (float)r;
    int32_t bd, br;
    memcpy(&bd, &d32, 4);
    memcpy(&br, &r32, 4);
    return ((bd >> 22) << 8) | (br >> 23);
}

typedef struct {
    const void *a, *b;
    int ka, kb;
    Py_ssize_t n, base, numel, chunk;
    int stride;
    double scale, rtol, atol;
    double *ds;   /* PD_N accumulators */
    int64_t *is;  /* PI_N_ counters */
    int64_t *hist;
} pair_job_t;

/* one finite pair's contributions (the slow path's element: same arithmetic as the block loop) */
static inline void pair_one(const pair_job_t *J, double x, double y, double *acc, double *mx,
                            int64_t *within)
{
    double d = fabs(y - x), r = fabs(x);
    double t = r > J->scale ? r : J->scale;
    double rel = d / t;
    double e = d - J->rtol * r;
    acc[0] += d;
    acc[1] += d * d;
    acc[2] += x * x;
    acc[3] += y * y;
    acc[4] += x * y;
    acc[5] += rel;
    if (d > mx[0]) mx[0] = d;
    if (rel > mx[1]) mx[1] = rel;
    if (e > mx[2]) mx[2] = e;
    if (d > J->atol) {
        double v = (d - J->atol) / r;
        if (v > mx[3]) mx[3] = v;
    }
    *within += e <= J->atol;
}

typedef double pv4d __attribute__((vector_size(32)));
typedef int64_t pv4i __attribute__((vector_size(32)));

static inline pv4d pv_blend(pv4i m, pv4d a, pv4d b) /* m ? a : b, lane by lane */
{
    return (pv4d)((m & (pv4i)a) | (~m & (pv4i)b));
}

/* A full block of PAIR_BLOCK pairs in vector lanes, when all of them are finite (returns 0,
 * touching nothing, otherwise): the sums in 4 lanes per quantity, the maxima lane-wise (the
 * same comparisons as pair_one), d and |r| kept in dd/rr for the histogram sample. */
static NP_CLONES int pair_block(const double *xa, const double *xb, double *dd, double *rr,
                                double scale, double rtol, double atol, double *acc, double *mx,
                                int64_t *within)
{
    const pv4i absmask = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    pv4d bad = {0, 0, 0, 0};
    for (int j = 0; j < PAIR_BLOCK; j += 4) {
        pv4d x, y;
        memcpy(&x, xa + j, sizeof x);
        memcpy(&y, xb + j, sizeof y);
        bad += (x - x) + (y - y); /* NaN in a lane once any element was NaN or +-Inf */
    }
    for (int k = 0; k < 4; k++)
        if (!(bad[k] == 0.0))
            return 0;
    const pv4d vs = {scale, scale, scale, scale}, vr = {rtol, rtol, rtol, rtol},
               va = {atol, atol, atol, atol}, ninf = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    pv4d s = {0, 0, 0, 0}, q = s, aa = s, bb = s, ab = s, sr = s;
    pv4d md = {mx[0], mx[0], mx[0], mx[0]}, mr = {mx[1], mx[1], mx[1], mx[1]},
         me = {mx[2], mx[2], mx[2], mx[2]}, mn = {mx[3], mx[3], mx[3], mx[3]};
    pv4i w = {0, 0, 0, 0};
    for (int j = 0; j < PAIR_BLOCK; j += 4) {
        pv4d x, y;
        memcpy(&x, xa + j, sizeof x);
        memcpy(&y, xb + j, sizeof y);
        pv4d d = (pv4d)((pv4i)(y - x) & absmask), r = (pv4d)((pv4i)x & absmask);
        pv4d t = pv_blend(r > vs, r, vs);
        pv4d rel = d / t;
        pv4d e = d - vr * r;
        pv4d v = pv_blend(d > va, (d - va) / r, ninf);
        s += d;
        q += d * d;
        aa += x * x;
        bb += y * y;
        ab += x * y;
        sr += rel;
        md = pv_blend(d > md, d, md);
        mr = pv_blend(rel > mr, rel, mr);
        me = pv_blend(e > me, e, me);
        mn = pv_blend(v > mn, v, mn);
        w -= (pv4i)(e <= va);
        memcpy(dd + j, &d, sizeof d);
        memcpy(rr + j, &r, sizeof r);
    }
    for (int k = 0; k < 4; k++) {
        acc[0] += s[k];
        acc[1] += q[k];
        acc[2] += aa[k];
        acc[3] += bb[k];
        acc[4] += ab[k];
        acc[5] += sr[k];
        if (md[k] > mx[0]) mx[0] = md[k];
        if (mr[k] > mx[1]) mx[1] = mr[k];
        if (me[k] > mx[2]) mx[2] = me[k];
        if (mn[k] > mx[3]) mx[3] = mn[k];
        *within += w[k];
    }
    return 1;
}

static void pair_run(pair_job_t *J)
{
    const double scale = J->scale, rtol = J->rtol, atol = J->atol;
    /* sums in two levels: `acc` collects PAIR_FLUSH blocks, then goes into `tot` (keeps the
     * rounding error of the sums near NumPy's pairwise sums) */
    double acc[6] = {0, 0, 0, 0, 0, 0}, tot[6] = {0, 0, 0, 0, 0, 0};
    int blocks = 0;
    double mx[4] = {J->ds[PD_MAX_D], J->ds[PD_MAX_REL], J->ds[PD_EXCESS], J->ds[PD_NEED]};
    int64_t n_fin = 0, within = 0, nan_mm = 0, inf_mm = 0, nf_match = 0, sampled = 0;
    int64_t lo = J->is[PI_LO], hi = J->is[PI_HI];
    double xa[PAIR_BLOCK], xb[PAIR_BLOCK], dd[PAIR_BLOCK], rr[PAIR_BLOCK];
    Py_ssize_t i = 0;
    while (i < J->n) {
        /* one histogram chunk (global positions [g0, g0 + chunk)) at a time */
        Py_ssize_t g = J->base + i;
        Py_ssize_t c0 = g - g % J->chunk, cidx = g / J->chunk;
        Py_ssize_t clen = J->numel - c0 < J->chunk ? J->numel - c0 : J->chunk;
        Py_ssize_t end = c0 + J->chunk - J->base;
        if (end > J->n) end = J->n;
        int64_t off = clen > J->stride ? cidx % J->stride : 0;
        /* finite pairs seen so far in this chunk: kept in is[PI_N_] scratch between calls */
        int64_t fin = (g == c0) ? 0 : J->is[PI_N_];
        int64_t next = fin <= off ? off : off + ((fin - off + J->stride - 1) / J->stride) * J->stride;
        while (i < end) {
            int m = end - i < PAIR_BLOCK ? (int)(end - i) : PAIR_BLOCK;
            load_block(xa, J->a, J->ka, i, m);
            load_block(xb, J->b, J->kb, i, m);
            if (m == PAIR_BLOCK && pair_block(xa, xb, dd, rr, scale, rtol, atol, acc, mx,
                                              &within)) {
                /* histogram: finite positions fin .. fin + m - 1 of this chunk */
                while (next < fin + m) {
                    int32_t bin = hist_bin(dd[next - fin], rr[next - fin]);
                    J->hist[bin + (sampled & 1) * PAIR_NBINS]++;
                    if (bin < lo) lo = bin;
                    if (bin > hi) hi = bin;
                    sampled++;
                    next += J->stride;
                }
                fin += m;
                n_fin += m;
            } else {
                for (int j = 0; j < m; j++) {
                    double x = xa[j], y = xb[j];
                    int fa = isfinite(x), fb = isfinite(y);
                    if (fa && fb) {
                        pair_one(J, x, y, acc, mx, &within);
                        if (fin == next) {
                            int32_t bin = hist_bin(fabs(y - x), fabs(x));
                            J->hist[bin + (sampled & 1) * PAIR_NBINS]++;
                            if (bin < lo) lo = bin;
                            if (bin > hi) hi = bin;
                            sampled++;
                            next += J->stride;
                        }
                        fin++;
                        n_fin++;
                        continue;
                    }
                    int na = isnan(x), nb = isnan(y);
                    int ia = !fa && !na, ib = !fb && !nb;
                    int same_inf = ia && ib && (signbit(x) != 0) == (signbit(y) != 0);
                    nan_mm += na != nb;
                    inf_mm += (ia || ib) && !(na || nb) && !same_inf;
                    if ((na && nb) || same_inf) {
                        nf_match++;
                        within++;
                    }
                }
            }
            i += m;
            if (++blocks == PAIR_FLUSH) {
                for (int k = 0; k < 6; k++) {
                    tot[k] += acc[k];
                    acc[k] = 0.0;
                }
                blocks = 0;
            }
        }
        J->is[PI_N_] = fin;
    }
    for (int k = 0; k < 6; k++)
        tot[k] += acc[k];
    J->ds[PD_SUM_D] += tot[0];
    J->ds[PD_SS_D] += tot[1];
    J->ds[PD_AA] += tot[2];
    J->ds[PD_BB] += tot[3];
    J->ds[PD_AB] += tot[4];
    J->ds[PD_SUM_REL] += tot[5];
    J->ds[PD_MAX_D] = mx[0];
    J->ds[PD_MAX_REL] = mx[1];
    J->ds[PD_EXCESS] = mx[2];
    J->ds[PD_NEED] = mx[3];
    J->is[PI_N] += n_fin;
    J->is[PI_WITHIN] += within;
    J->is[PI_NAN_MM] += nan_mm;
    J->is[PI_INF_MM] += inf_mm;
    J->is[PI_NF_MATCH] += nf_match;
    J->is[PI_SAMPLED] += sampled;
    J->is[PI_LO] = lo;
    J->is[PI_HI] = hi;
}

static int pair_kind(const Py_buffer *v, int kind, Py_ssize_t *n)
{
    static const int size[4] = {8, 4, 2, 2};
    if (kind < 0 || kind > 3) {
        PyErr_SetString(PyExc_ValueError, "fastvec.pair_update: kind must be 0..3");
        return -1;
    }
    if (v->len % size[kind]) {
        PyErr_SetString(PyExc_ValueError, "fastvec.pair_update: buffer size is not a whole "
                                          "number of elements");
        return -1;
    }
    *n = v->len / size[kind];
    return 0;
}

static int pair_out(PyObject *obj, Py_buffer *v, Py_ssize_t want, Py_ssize_t itemsize,
                    const char *fmt)
{
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return -1;
    if (v->itemsize != itemsize || v->len < want * itemsize || v->format == NULL ||
        (strcmp(v->format, fmt) != 0 && !(fmt[0] == 'q' && strcmp(v->format, "l") == 0))) {
        PyErr_SetString(PyExc_ValueError, "fastvec.pair_update: bad state buffer");
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

/* pair_update(ref, ref_kind, cand, cand_kind, dstate, istate, hist, base, numel, chunk, stride,
 *             scale, rtol, atol) -> None
 *
 * Adds the elements [base, base + n) of a pair (ref/cand: raw stored bits, n elements each,
 * kinds 0 float64, 1 float32, 2 float16, 3 bfloat16) to the running state: `dstate` float64
 * [sum_d, max_d, ss_d, aa, bb, ab, sum_rel, max_rel, excess, need], `istate` int64 [n, within,
 * nan_mismatch, inf_mismatch, nonfinite_match, sampled, lo, hi, (scratch)], `hist` int64
 * (two copies of the 1 << 17 bins, filled by alternate samples -- consecutive increments of
 * one bin form a chain through memory, measured 4.0 -> 2.5 ns per element; the caller adds
 * them up -- lo/hi the occupied range).  Calls must come in order of `base`; `numel` is the
 * pair's total, `chunk` the histogram's chunk and `stride` its sampling stride.  `scale` must
 * be positive and finite, rtol/atol not NaN (the caller checks).  Releases the GIL. */
static PyObject *fastvec_pair_update(PyObject *self, PyObject *args)
{
    PyObject *oa, *ob, *ods, *ois, *oh;
    pair_job_t J;
    Py_ssize_t na, nb;
    Py_buffer va, vb, vds, vis, vh;
    (void)self;
    if (!PyArg_ParseTuple(args, "OiOiOOOnnniddd", &oa, &J.ka, &ob, &J.kb, &ods, &ois, &oh,
                          &J.base, &J.numel, &J.chunk, &J.stride, &J.scale, &J.rtol, &J.atol))
        return NULL;
    if (J.chunk < 1 || J.stride < 1 || J.base < 0 || !(J.scale > 0.0) || isinf(J.scale) ||
        isnan(J.rtol) || isnan(J.atol)) {
        PyErr_SetString(PyExc_ValueError, "fastvec.pair_update: bad chunk/stride/base/scale/"
                                          "tolerance");
        return NULL;
    }
    if (PyObject_GetBuffer(oa, &va, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(ob, &vb, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&va);
        return NULL;
    }
    int bad = pair_kind(&va, J.ka, &na) < 0 || pair_kind(&vb, J.kb, &nb) < 0;
    if (!bad && na != nb) {
        PyErr_SetString(PyExc_ValueError, "fastvec.pair_update: element counts differ");
        bad = 1;
    }
    if (!bad && J.base + na > J.numel) {
        PyErr_SetString(PyExc_ValueError, "fastvec.pair_update: past the pair's end");
        bad = 1;
    }
    int got = 0;
    if (!bad) {
        if (pair_out(ods, &vds, PD_N, 8, "d") == 0) {
            got = 1;
            if (pair_out(ois, &vis, PI_N_ + 1, 8, "q") == 0) {
                got = 2;
                if (pair_out(oh, &vh, 2 * PAIR_NBINS, 8, "q") == 0)
                    got = 3;
            }
        }
    }
    if (got == 3) {
        J.a = va.buf;
        J.b = vb.buf;
        J.n = na;
        J.ds = (double *)vds.buf;
        J.is = (int64_t *)vis.buf;
        J.hist = (int64_t *)vh.buf;
        Py_BEGIN_ALLOW_THREADS
        pair_run(&J);
        Py_END_ALLOW_THREADS
    }
    if (got >= 3) PyBuffer_Release(&vh);
    if (got >= 2) PyBuffer_Release(&vis);
    if (got >= 1) PyBuffer_Release(&vds);
    PyBuffer_Release(&vb);
    PyBuffer_Release(&va);
    if (got < 3)
        return NULL;
    Py_RETURN_NONE;
}
#pragma GCC pop_options

static PyMethodDef methods[] = {
    {"stats", fastvec_stats, METH_VARARGS,
     "stats(buffer, threads=1, shift=0.0) -> (min, max, sum, sum_sq, abs_sum, zeros) of a "
     "float32/float64 buffer minus shift, in one pass; NaN is ignored by min/max but makes the sums non-finite."},
    {"vec", fastvec_vec, METH_VARARGS,
     "vec(buffer, threads=1) -> the 12-number statistics vector of a float32/float64 buffer "
     "(netparity.hoststats.finite_vec), or None when it needs the exact, masked path."},
    {"stats_sum", fastvec_stats_sum, METH_VARARGS,
     "stats_sum(buffers, threads=1, shift=0.0, last=False) -> stats() of the element-wise "
     "float32 sum of 2..8 equal-length float32 buffers (left to right), without materialising "
     "it; with last, followed by stats(buffers[-1], threads) from the same pass."},
    {"stats_many", fastvec_stats_many, METH_VARARGS,
     "stats_many(buffers, threads=1, vectors=False) -> [stats(b, threads) for b in buffers] "
     "(with vectors, [vec(b, threads) ...]) in one call, every buffer's parts in one parallel "
     "region."},
    {"stats_relu", fastvec_stats_relu, METH_VARARGS,
     "stats_relu(buffer, threads=1) -> stats() of a float32 buffer, then the sum and sum of "
     "squares of max(x, 0) and the count of x > 0, in the same pass."},
    {"use_avx512", fastvec_use_avx512, METH_VARARGS,
     "use_avx512(flag=None) -> bool: whether the AVX-512 loops run; False selects the "
     "portable loops (tests), True goes back where the CPU supports it."},
    {"bind_openmp", fastvec_bind_openmp, METH_VARARGS,
     "bind_openmp(prefer='') -> path or None: run threads >= 2 on the loaded OpenMP runtime "
     "(the one whose path contains prefer, else any); None when none is loaded."},
    {"unbind_openmp", fastvec_unbind_openmp, METH_NOARGS,
     "unbind_openmp() -> None: threads >= 2 use POSIX threads again."},
    {"pair_update", fastvec_pair_update, METH_VARARGS,
     "pair_update(ref, ref_kind, cand, cand_kind, dstate, istate, hist, base, numel, chunk, "
     "stride, scale, rtol, atol) -> None: add elements [base, base + n) of a tensor pair to "
     "its running error metrics (netparity.compare.metrics), in one pass over the stored bits "
     "(kinds 0 float64, 1 float32, 2 float16, 3 bfloat16)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_fastvec", "One-pass tensor statistics (see _fastvec.c).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastvec(void)
{
    return PyModule_Create(&moduledef);
}
