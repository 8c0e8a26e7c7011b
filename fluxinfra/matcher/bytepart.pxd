# Declarations Cython reads beside bytepart.py when ``fluxinfra compile`` makes it C (the .py
# stays plain Python; this file is never imported). The block scans below are
# bytepart.partition's, each block's stops found 32 keys per instruction (AVX2) and paired
# with bit scans; the pivot and the closing branching loop stay in bytepart.py. Used only
# where the processor has AVX2 (checked at run time, so a module compiled here also loads on
# a processor without it: bytepart.SIMD is then False and the typed loop in bytepart.py
# runs).

cdef extern from *:
    """
    #include <stdint.h>

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

    /* The block scans of bytepart.partition's loop, for pivot p, from lo (the left scan)
       and hi (the right one): blocks of 64 keys, [lo, lo + 64) from the left and
       (hi - 64, hi] from the right, never overlapping; a block's stops are a bit mask, used
       up pair by pair (lowest bit first on both sides: the right mask is read in descending
       positions) before that side's next block. The same swaps in the same order as the
       branching loop, recorded from left/right[m]. Leaves lo and hi where the branching
       loop goes on (an unused stop is where that scan stopped; fewer than 129 keys between
       them) and returns m past the last swap recorded. */
    FLUXINFRA_BP_AVX2 static Py_ssize_t fluxinfra_bp_blocks_avx2(
            unsigned char *v, unsigned char p, Py_ssize_t *lo_io, Py_ssize_t *hi_io,
            int *left, int *right, Py_ssize_t m) {
        Py_ssize_t lo = *lo_io, hi = *hi_io, a, b;
        uint64_t ml = 0, mr = 0;
        int have_l = 0, have_r = 0, k, kr, i;
        unsigned char t;
        __m256i pv = _mm256_set1_epi8((char)p);
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
        if (have_l && ml) lo += __builtin_ctzll(ml);
        if (have_r && mr) hi -= __builtin_ctzll(mr);
        *lo_io = lo;
        *hi_io = hi;
        return m;
    }

    static int fluxinfra_bp_simd(void) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi");
    }
    #else
    static Py_ssize_t fluxinfra_bp_blocks_avx2(
            unsigned char *v, unsigned char p, Py_ssize_t *lo_io, Py_ssize_t *hi_io,
            int *left, int *right, Py_ssize_t m) {
        (void)v; (void)p; (void)lo_io; (void)hi_io; (void)left; (void)right;
        return m;  /* (never called: SIMD is False here) */
    }
    static int fluxinfra_bp_simd(void) { return 0; }
    #endif
    """
    Py_ssize_t fluxinfra_bp_blocks_avx2(unsigned char *v, unsigned char p, Py_ssize_t *lo_io,
                                        Py_ssize_t *hi_io, int *left, int *right,
                                        Py_ssize_t m)
    int fluxinfra_bp_simd()
