/* isa_dispatch.c - the host extension's choice among its copies of the C core (trainer/isa_dispatch.h): one
 * table of entry points per variant, the one that runs chosen by mct_isa_select (the fastest the CPU runs,
 * unless told otherwise). The choice is the only mutable state, one pointer read and written atomically, so
 * a switch while other threads train is safe: each call runs wholly in one copy, and every copy computes the
 * same bits. Host only: devices compile the core once, without this. */
#include "isa_dispatch.h"

#include <string.h>

#ifndef MCT_ISA_BASE_NAME
#define MCT_ISA_BASE_NAME "baseline"
#endif

/* a variant's copy of function f: f_S (the baseline copy keeps the core's names) */
#define MCT_ISA_DECLARE_avx2(f) extern __typeof__(f) f##_avx2;
#define MCT_ISA_DECLARE_avx512(f) extern __typeof__(f) f##_avx512;
#define MCT_ISA_PTR_baseline(f) f,
#define MCT_ISA_PTR_avx2(f) f##_avx2,
#define MCT_ISA_PTR_avx512(f) f##_avx512,

typedef struct isa_variant {
    const char *name;
    int (*runs)(void);
    mct_isa_core_fns fns;
} isa_variant;

static int runs_always(void) { return 1; }
#ifdef MCT_ISA_HAVE_AVX2
static int runs_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
MCT_ISA_FUNCTIONS(MCT_ISA_DECLARE_avx2)
#endif
#ifdef MCT_ISA_HAVE_AVX512
static int runs_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw");
}
MCT_ISA_FUNCTIONS(MCT_ISA_DECLARE_avx512)
#endif

/* the variants, slowest first (the table's fields in the order of MCT_ISA_FUNCTIONS, as the struct's) */
static const isa_variant variants[] = {
    {MCT_ISA_BASE_NAME, runs_always, {MCT_ISA_FUNCTIONS(MCT_ISA_PTR_baseline)}},
#ifdef MCT_ISA_HAVE_AVX2
    {"avx2", runs_avx2, {MCT_ISA_FUNCTIONS(MCT_ISA_PTR_avx2)}},
#endif
#ifdef MCT_ISA_HAVE_AVX512
    {"avx512", runs_avx512, {MCT_ISA_FUNCTIONS(MCT_ISA_PTR_avx512)}},
#endif
};
#define N_VARIANTS ((int)(sizeof(variants) / sizeof(variants[0])))

/* The chosen variant, the one piece of mutable state: written by mct_isa_select (at import, and when asked),
 * read by every call of the core; atomic, so a thread reads the old choice or the new one, never a torn one. */
static const isa_variant *active = &variants[0];

static const isa_variant *now(void) { return __atomic_load_n(&active, __ATOMIC_ACQUIRE); }

int mct_isa_count(void) { return N_VARIANTS; }

const char *mct_isa_name(int i) { return i >= 0 && i < N_VARIANTS ? variants[i].name : 0; }

int mct_isa_runs(int i) { return i >= 0 && i < N_VARIANTS && variants[i].runs(); }

int mct_isa_select(const char *name) {
    int pick = -1;
    for (int i = 0; i < N_VARIANTS; i++) {
        if (name ? strcmp(name, variants[i].name) == 0 : variants[i].runs()) pick = i;
    }
    if (pick < 0 || !variants[pick].runs()) return -1;
    __atomic_store_n(&active, &variants[pick], __ATOMIC_RELEASE);
    return pick;
}

const char *mct_isa_active(void) { return now()->name; }

const mct_isa_core_fns *mct_isa_core(void) { return &now()->fns; }

uintptr_t mct_isa_entry(const char *name) {
    const mct_isa_core_fns *t = mct_isa_core();
#define MCT_ISA_LOOKUP(f) \
    if (strcmp(name, #f) == 0) return (uintptr_t)t->f;
    MCT_ISA_FUNCTIONS(MCT_ISA_LOOKUP)
#undef MCT_ISA_LOOKUP
    return 0;
}
