# Declarations Cython reads beside bytepart.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). The partition below is the same as
# bytepart.partition's, with each block's stops found 32 keys per instruction (AVX2) and
# paired with bit scans; it is used only where the processor has AVX2 (checked at run time,
# so a module compiled here also loads on a processor without it: bytepart.SIMD is then
# False and the typed loop in bytepart.py runs).

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>

    /* std::__unguarded_partition_pivot's branching loop, from where the block scans stand:
       the left scan at lo, the right scan about to step down from hi + 1. */
    static Py_ssize_t fluxinfra_bp_tail(unsigned char *v, Py_ssize_t lo, Py_ssize_t hi,
                                        unsigned char p, int *left, int *right,
                                        Py_ssize_t *m) {
        unsigned char t;
        hi += 1;
        for (;;) {
            while (v[lo] < p) lo++;
            hi--;
            while (p < v[hi]) hi--;
            if (!(lo < hi)) return lo;
            t = v[lo]; v[lo] = v[hi]; v[hi] = t;
            left[*m] = (int)lo; right[*m] = (int)hi; (*m)++;
            lo++;
        }
    }

    /* std::__move_median_to_first(first, first + 1, mid, last - 1): where the pivot is
       taken from. */
    static Py_ssize_t fluxinfra_bp_pick(const unsigned char *v, Py_ssize_t first,
                                        Py_ssize_t last) {
        Py_ssize_t mid = first + (last - first) / 2;
        unsigned char x = v[first + 1], y = v[mid], z = v[last - 1];
        if (x < y) {
            if (y < z) return mid;
            if (x < z) return last - 1;
            return first + 1;
        }
        if (x < z) return first + 1;
        if (y < z) return last - 1;
        return mid;
    }

    #if defined(__GNUC__) && defined(__x86_64__)
    #include <immintrin.h>
    #define FLUXINFRA_BP_AVX2 __attribute__((target("avx2,bmi")))

    /* bit j set: key lo + j >= p (j < 64) */
    FLUXINFRA_BP_AVX2 static inline uint64_t fluxinfra_bp_ge(const unsigned char *s,
                                                               __m256i pv) {
        __m256i a = _mm256_loadu_si256((const __m256i *)s);
        __m256i b = _mm256_loadu_si256((const __m256i *)(s + 32));
        uint32_t ma = (uint32_t)_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(_mm256_max_epu8(a, pv), a));
        uint32_t mb = (uint32_t)_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(_mm256_max_epu8(b, pv), b));
        return (uint64_t)ma | ((uint64_t)mb << 32);
    }

    /* the 32 bytes of x in reverse order */
    FLUXINFRA_BP_AVX2 static inline __m256i fluxinfra_bp_rev(__m256i x) {
        const __m256i idx = _mm256_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,
                                             1, 0, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4,
                                             3, 2, 1, 0);
        return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(x, idx), 0x4E);
    }

    /* bit j set: key top - j <= p (j < 64): the right scan's order */
    FLUXINFRA_BP_AVX2 static inline uint64_t fluxinfra_bp_le(const unsigned char *top,
                                                               __m256i pv) {
        __m256i b = fluxinfra_bp_rev(_mm256_loadu_si256((const __m256i *)(top - 31)));
        __m256i a = fluxinfra_bp_rev(_mm256_loadu_si256((const __m256i *)(top - 63)));
        uint32_t mb = (uint32_t)_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(_mm256_min_epu8(b, pv), b));
        uint32_t ma = (uint32_t)_mm256_movemask_epi8(
            _mm256_cmpeq_epi8(_mm256_min_epu8(a, pv), a));
        return (uint64_t)mb | ((uint64_t)ma << 32);
    }

    /* The partition of v[first:last] (more than 16 keys), its swaps recorded from
       left/right[off]: the same cut, pivot, keys and swaps as the branching loop. Blocks of
       64 keys: [lo, lo + 64) from the left, (hi - 64, hi] from the right, never overlapping;
       a block's stops are a bit mask, used up pair by pair (lowest bit first on both sides:
       the right mask is read in descending positions) before that side's next block. */
    FLUXINFRA_BP_AVX2 static Py_ssize_t fluxinfra_bp_partition_avx2(
            unsigned char *v, Py_ssize_t first, Py_ssize_t last, int *left, int *right,
            Py_ssize_t off, Py_ssize_t *pick_out, Py_ssize_t *swaps_out) {
        Py_ssize_t pick = fluxinfra_bp_pick(v, first, last);
        Py_ssize_t m = off, lo = first + 1, hi = last - 1, a, b;
        uint64_t ml = 0, mr = 0;
        int have_l = 0, have_r = 0, k, kr, i;
        unsigned char t = v[first], p;
        __m256i pv;
        v[first] = v[pick]; v[pick] = t;
        p = v[first];
        pv = _mm256_set1_epi8((char)p);
        while (hi - lo + 1 > 128) {
            if (!have_l) { ml = fluxinfra_bp_ge(v + lo, pv); have_l = 1; }
            if (!have_r) { mr = fluxinfra_bp_le(v + hi, pv); have_r = 1; }
            k = __builtin_popcountll(ml);
            kr = __builtin_popcountll(mr);
            if (kr < k) k = kr;
            for (i = 0; i < k; i++) {
                a = lo + __builtin_ctzll(ml);
                b = hi - __builtin_ctzll(mr);
                ml &= ml - 1;
                mr &= mr - 1;
                t = v[a]; v[a] = v[b]; v[b] = t;
                left[m + i] = (int)a;
                right[m + i] = (int)b;
            }
            m += k;
            if (!ml) { lo += 64; have_l = 0; }
            if (!mr) { hi -= 64; have_r = 0; }
        }
        /* a listed stop not yet used is where that scan stopped */
        if (have_l && ml) lo += __builtin_ctzll(ml);
        if (have_r && mr) hi -= __builtin_ctzll(mr);
        lo = fluxinfra_bp_tail(v, lo, hi, p, left, right, &m);
        *pick_out = pick;
        *swaps_out = m - off;
        return lo;
    }

    static int fluxinfra_bp_simd(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
    }
    #else
    static Py_ssize_t fluxinfra_bp_partition_avx2(
            unsigned char *v, Py_ssize_t first, Py_ssize_t last, int *left, int *right,
            Py_ssize_t off, Py_ssize_t *pick_out, Py_ssize_t *swaps_out) {
        (void)v; (void)first; (void)last; (void)left; (void)right; (void)off;
        *pick_out = -1; *swaps_out = 0;
        return -1;
    }
    static int fluxinfra_bp_simd(void) { return 0; }
    #endif
    """
    Py_ssize_t fluxinfra_bp_partition_avx2(unsigned char *v, Py_ssize_t first,
                                           Py_ssize_t last, int *left, int *right,
                                           Py_ssize_t off, Py_ssize_t *pick_out,
                                           Py_ssize_t *swaps_out)
    int fluxinfra_bp_simd()
