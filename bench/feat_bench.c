/* feat_bench.c - the firmware side of bench/features.py: the 49 frames of the MLPerf Tiny KWS MFCC on one second
 * of audio, by mcutrain's core (mct_feat_frame, tables in flash as the host computed them) and by CMSIS-DSP's
 * arm_mfcc_f32 (built from the cmsisdsp sdist), each frame between marker functions that QEMU's instruction
 * plugin counts. Prints both outputs (hex words) through Arm semihosting. bench_data.h is generated. */
#include <stdint.h>
#include <string.h>

#include "bench_data.h"
#include "mct_feat.h"
#if BENCH_CMSIS
#include "arm_math.h"
#endif

static uintptr_t sh_call(uintptr_t op, const void *arg) {
    register uintptr_t r0 __asm("r0") = op;
    register const void *r1 __asm("r1") = arg;
    __asm volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
static char line[129];
static uint32_t line_n;
static void put_c(char ch) {
    line[line_n++] = ch;
    if (ch == '\n' || line_n == sizeof line - 1u) {
        line[line_n] = 0;
        sh_call(0x04u, line);
        line_n = 0;
    }
}
static void put_s(const char *s) { while (*s) put_c(*s++); }
static void put_hex(uint32_t v) { for (int i = 7; i >= 0; i--) put_c("0123456789abcdef"[(v >> (4 * i)) & 15u]); }
static void put_out(const char *tag, const float *v, uint32_t n) {
    put_s(tag);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        put_c(' ');
        put_hex(u);
    }
    put_c('\n');
}
void port_exit(int code);
void port_exit(int code) {
    uintptr_t blk[2] = {0x20026u, (uintptr_t)(intptr_t)code};
    for (;;) sh_call(0x20u, blk);
}

/* The markers: the plugin counts from the first instruction of *_begin to the first of *_end. */
__attribute__((noinline)) void bench_ours_begin(void) { __asm volatile(""); }
__attribute__((noinline)) void bench_ours_end(void) { __asm volatile(""); }
__attribute__((noinline)) void bench_cmsis_begin(void) { __asm volatile(""); }
__attribute__((noinline)) void bench_cmsis_end(void) { __asm volatile(""); }

static float ours_scratch[BENCH_OURS_SCRATCH];
static float ours_out[BENCH_FRAMES * BENCH_COEF];
#if BENCH_CMSIS
static arm_mfcc_instance_f32 mfcc;
static float cm_buf[BENCH_FFT];
static float cm_tmp[2 * BENCH_FFT];   /* arm_mfcc_f32 reads 2 x fftLen floats of it (TOOLCHAINS.md section 8) */
static float cm_out[BENCH_FRAMES * BENCH_COEF];
#endif

int main(void) {
    for (uint32_t f = 0; f < BENCH_FRAMES; f++) {
        bench_ours_begin();
        mct_feat_frame(&bench_cfg, bench_tables, bench_signal, NULL, f, ours_out + f * BENCH_COEF, ours_scratch);
        bench_ours_end();
    }
    put_out("ours", ours_out, BENCH_FRAMES * BENCH_COEF);
#if BENCH_CMSIS
    if (arm_mfcc_init_512_f32(&mfcc, BENCH_MELS, BENCH_COEF, bench_dct, bench_fpos, bench_flen,
                              bench_fcoef, bench_window) != ARM_MATH_SUCCESS)
        port_exit(3);
    for (uint32_t f = 0; f < BENCH_FRAMES; f++) {
        bench_cmsis_begin();
        memcpy(cm_buf, bench_signal + f * BENCH_STEP, sizeof(float) * BENCH_FRAME);
        memset(cm_buf + BENCH_FRAME, 0, sizeof(float) * (BENCH_FFT - BENCH_FRAME));
        arm_mfcc_f32(&mfcc, cm_buf, cm_out + f * BENCH_COEF, cm_tmp);
        bench_cmsis_end();
    }
    put_out("cmsis", cm_out, BENCH_FRAMES * BENCH_COEF);
#endif
    put_s("done\n");
    port_exit(0);
    return 0;
}
