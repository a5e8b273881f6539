/*
 * netparity._fastvec -- one-pass tensor statistics for CPU capture.
 *
 * Capture computes, for every recorded tensor, min, max, sum, sum of squares, sum of |x| and
 * the count of zeros.  NumPy needs one memory pass per statistic (five or six passes); on a
 * ResNet-50 step that is ~3 GB of activations and gradients read five times, which alone
 * doubles the step time.  This kernel reads each element once and keeps every accumulator in
 * vector registers (GCC vector extensions, no intrinsics).  The caller may split a large
 * tensor over two threads (`threads=2`); capture does not, see KERNEL_THREADS in
 * hoststats.py.
 *
 * Precision: float32 data is summed in float32 lanes in two levels -- BLOCK elements give 8
 * additions per lane, SUPER / BLOCK block sums are added per lane -- and every SUPER elements
 * the lanes go into float64 totals: a pairwise-like scheme with relative errors around 1e-7,
 * like NumPy's pairwise float32 sums.  float64 data is accumulated in float64.
 *
 * Non-finite values: the comparisons used for min/max ignore NaN, so the caller must check
 * the sums: any NaN or +-Inf makes `sum_sq` non-finite (so does a float32 square beyond
 * 3.4e38, which is harmless: such data is far outside float16 range anyway).  The Python side
 * then takes its exact, finite-masked path.
 *
 * GNU C (GCC or Clang) and POSIX threads; `target_clones` builds AVX-512, AVX2 and baseline versions
 * of the block loops where the compiler supports it and picks one at load time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#define LANES 32
#define BLOCK 256  /* float32 elements per inner block (8 additions per lane) */
#define SUPER 4096 /* elements per float64 flush (16 block sums per lane) */

#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__) && !defined(__clang__)
#define NP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define NP_CLONES
#endif

typedef struct {
    const void *data;
    Py_ssize_t n;
    int is_double;
    double shift; /* statistics of x - shift (in x's precision) */
    double mn, mx, sum, sumsq, abssum;
    Py_ssize_t zeros;
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

typedef float vf __attribute__((vector_size(64)));
typedef int vi __attribute__((vector_size(64)));
#define VW 16 /* floats per vector */

/* Macros, not inline functions: a helper without the clone's target attribute could not be
 * inlined into the AVX-512/AVX2 clones and would pass vectors through memory. */
#define LOAD_VF(dst, p) memcpy(&(dst), (p), sizeof(vf)) /* unaligned load */
#define SELECT_VF(m, a, b) ((vf)(((vi)(a) & (m)) | ((vi)(b) & ~(m))))

NP_CLONES
static void stats_f32(part_t *p)
{
    const float *x = (const float *)p->data;
    const Py_ssize_t n = p->n;
    double sum = 0.0, sumsq = 0.0, abssum = 0.0;
    Py_ssize_t zeros = 0;
    Py_ssize_t i = 0;
    const vi absmask = (vi){0} + 0x7fffffff;
    const float shift = (float)p->shift;
    const vf sh = (vf){0} + shift;
    vf mn0 = (vf){0} + (x[0] - shift), mx0 = mn0, mn1 = mn0, mx1 = mn0;
    for (; i + SUPER <= n; i += SUPER) {
        /* float32 partial sums: BLOCK / (2 * VW) additions per lane within a block, then
         * SUPER / BLOCK additions of block sums, then the lanes go into float64 totals */
        vf S = {0}, Q = {0}, A = {0};
        vi Z = {0};
        for (int blk = 0; blk < SUPER; blk += BLOCK) {
            /* two independent accumulator sets hide the add latency */
            vf s0 = {0}, s1 = {0}, q0 = {0}, q1 = {0}, a0 = {0}, a1 = {0};
            const float *b = x + i + blk;
            for (int k = 0; k < BLOCK; k += 2 * VW) {
                vf v0, v1;
                LOAD_VF(v0, b + k);
                LOAD_VF(v1, b + k + VW);
                v0 -= sh;
                v1 -= sh;
                s0 += v0;
                s1 += v1;
                q0 += v0 * v0;
                q1 += v1 * v1;
                a0 += (vf)((vi)v0 & absmask);
                a1 += (vf)((vi)v1 & absmask);
                Z -= (v0 == 0.0f); /* comparisons give -1 where true */
                Z -= (v1 == 0.0f);
                mn0 = SELECT_VF(v0 < mn0, v0, mn0);
                mn1 = SELECT_VF(v1 < mn1, v1, mn1);
                mx0 = SELECT_VF(v0 > mx0, v0, mx0);
                mx1 = SELECT_VF(v1 > mx1, v1, mx1);
            }
            S += s0 + s1;
            Q += q0 + q1;
            A += a0 + a1;
        }
        for (int j = 0; j < VW; j++) {
            sum += S[j];
            sumsq += Q[j];
            abssum += A[j];
            zeros += Z[j];
        }
    }
    float fmn = x[0] - shift, fmx = fmn;
    for (int j = 0; j < VW; j++) {
        fmn = mn0[j] < fmn ? mn0[j] : fmn;
        fmn = mn1[j] < fmn ? mn1[j] : fmn;
        fmx = mx0[j] > fmx ? mx0[j] : fmx;
        fmx = mx1[j] > fmx ? mx1[j] : fmx;
    }
    set_totals(p, fmn, fmx, sum, sumsq, abssum, zeros);
    for (; i < n; i++) /* the tail, shorter than SUPER, in float64 */
        add_scalar(p, x[i] - shift);
}

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

static void run_part(part_t *p)
{
    if (p->is_double)
        stats_f64(p);
    else
        stats_f32(p);
}

static void *thread_main(void *arg)
{
    run_part((part_t *)arg);
    return NULL;
}

/* stats(buffer, threads, shift) -> (min, max, sum, sum_sq, abs_sum, zeros) of buffer - shift
 *
 * `buffer`: a C-contiguous buffer of format 'f' (float32) or 'd' (float64) with at least one
 * element.  `threads`: 1 or 2; with 2, buffers of at least 2**19 elements are split in halves
 * (the split points are fixed, so the result is deterministic).  `shift` (default 0) is
 * subtracted from every element first, in the buffer's precision: a second call with the mean
 * gives the sum of squared deviations without cancellation and without a temporary array. */
static PyObject *fastvec_stats(PyObject *self, PyObject *args)
{
    PyObject *obj;
    int threads = 1;
    double shift = 0.0;
    Py_buffer view;
    (void)self;
    if (!PyArg_ParseTuple(args, "O|id", &obj, &threads, &shift))
        return NULL;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    int is_double;
    if (view.format != NULL && strcmp(view.format, "f") == 0 && view.itemsize == 4)
        is_double = 0;
    else if (view.format != NULL && strcmp(view.format, "d") == 0 && view.itemsize == 8)
        is_double = 1;
    else {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "fastvec.stats: buffer must hold float32 or float64");
        return NULL;
    }
    Py_ssize_t n = view.len / view.itemsize;
    if (n < 1) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "fastvec.stats: empty buffer");
        return NULL;
    }
    part_t parts[2];
    memset(parts, 0, sizeof(parts));
    int nparts = (threads >= 2 && n >= ((Py_ssize_t)1 << 19)) ? 2 : 1;
    Py_ssize_t half = nparts == 2 ? (n / 2 / SUPER) * SUPER : n;
    parts[0].data = view.buf;
    parts[0].n = half;
    parts[0].is_double = is_double;
    parts[0].shift = shift;
    parts[1].data = (const char *)view.buf + half * view.itemsize;
    parts[1].n = n - half;
    parts[1].is_double = is_double;
    parts[1].shift = shift;
    Py_BEGIN_ALLOW_THREADS
    pthread_t tid;
    int spawned = nparts == 2 && pthread_create(&tid, NULL, thread_main, &parts[1]) == 0;
    run_part(&parts[0]);
    if (spawned)
        pthread_join(tid, NULL);
    else if (nparts == 2)
        run_part(&parts[1]);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    part_t r = parts[0];
    if (nparts == 2) {
        r.mn = parts[1].mn < r.mn ? parts[1].mn : r.mn;
        r.mx = parts[1].mx > r.mx ? parts[1].mx : r.mx;
        r.sum += parts[1].sum;
        r.sumsq += parts[1].sumsq;
        r.abssum += parts[1].abssum;
        r.zeros += parts[1].zeros;
    }
    return Py_BuildValue("dddddn", r.mn, r.mx, r.sum, r.sumsq, r.abssum, r.zeros);
}

static PyMethodDef methods[] = {
    {"stats", fastvec_stats, METH_VARARGS,
     "stats(buffer, threads=1, shift=0.0) -> (min, max, sum, sum_sq, abs_sum, zeros) of a "
     "float32/float64 buffer minus shift, in one pass; NaN is ignored by min/max but makes the sums non-finite."},
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
