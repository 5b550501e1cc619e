/* isa_dispatch.h - which copy of the hot kernels the host extension runs (trainer/isa_dispatch.c). */
#ifndef MCT_ISA_DISPATCH_H
#define MCT_ISA_DISPATCH_H

/* Number of variants built into this extension (the baseline first, then wider instruction sets). */
int mct_isa_count(void);
/* Name of variant i ("baseline", "avx2", "avx512"), or 0 when there is no such variant. */
const char *mct_isa_name(int i);
/* 1 when this CPU can run variant i. */
int mct_isa_runs(int i);
/* Run the named variant (0: the widest this CPU runs); its index, or -1 when unknown or not runnable here. */
int mct_isa_select(const char *name);
/* Name of the variant that runs now. */
const char *mct_isa_active(void);

#endif /* MCT_ISA_DISPATCH_H */
