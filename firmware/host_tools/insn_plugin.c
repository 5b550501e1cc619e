/* insn_plugin.c - QEMU TCG plugin of mcutrain: counts guest instructions per measured region.
 *
 * A region is delimited by two marker functions of the firmware (ports/port_qemu_common.h): it counts
 * the instructions executed from the first instruction of its begin marker up to (not including) the
 * first instruction of its end marker, and how many begin..end pairs ran. Several regions are counted
 * at once, independently (they may nest or overlap).
 *
 *   qemu-system-arm ... -plugin ./insn_plugin.so,out=FILE,region=NAME:BEGIN:END[,region=...]
 *
 * BEGIN and END are the markers' addresses (hex with 0x, or decimal; bit 0, the Thumb bit, is
 * ignored). When QEMU exits, the plugin writes to FILE (or QEMU's plugin log, -d plugin, without out=):
 *   insn_total=N
 *   region=NAME insns=N pairs=N min=N max=N
 * (min and max over the pairs; 0 when no pair ran). Instructions are counted with inline adds of the
 * TCG code, so counting does not change what the guest does.
 *
 * Debian's QEMU (7.2) supports plugins but ships no qemu-plugin.h: the few declarations of the plugin
 * API (version 1) used here are written out below. Build: gcc -shared -fPIC -O2 -o insn_plugin.so insn_plugin.c */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the part of QEMU's plugin API (version 1) this plugin uses ---- */
typedef uint64_t qemu_plugin_id_t;
typedef struct qemu_info_t qemu_info_t;
struct qemu_plugin_tb;
struct qemu_plugin_insn;
enum qemu_plugin_cb_flags { QEMU_PLUGIN_CB_NO_REGS, QEMU_PLUGIN_CB_R_REGS, QEMU_PLUGIN_CB_RW_REGS };
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
typedef void (*qemu_plugin_vcpu_tb_trans_cb_t)(qemu_plugin_id_t id, struct qemu_plugin_tb *tb);
typedef void (*qemu_plugin_vcpu_udata_cb_t)(unsigned int vcpu_index, void *userdata);
typedef void (*qemu_plugin_udata_cb_t)(qemu_plugin_id_t id, void *userdata);

void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_tb_trans_cb_t cb);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *tb);
struct qemu_plugin_insn *qemu_plugin_tb_get_insn(const struct qemu_plugin_tb *tb, size_t idx);
uint64_t qemu_plugin_insn_vaddr(const struct qemu_plugin_insn *insn);
void qemu_plugin_register_vcpu_insn_exec_inline(struct qemu_plugin_insn *insn, enum qemu_plugin_op op,
                                                void *ptr, uint64_t imm);
void qemu_plugin_register_vcpu_insn_exec_cb(struct qemu_plugin_insn *insn, qemu_plugin_vcpu_udata_cb_t cb,
                                            enum qemu_plugin_cb_flags flags, void *userdata);
void qemu_plugin_register_atexit_cb(qemu_plugin_id_t id, qemu_plugin_udata_cb_t cb, void *userdata);
void qemu_plugin_outs(const char *string);

__attribute__((visibility("default"))) int qemu_plugin_version = 1;

/* ---- regions ---- */
#define MAX_REGIONS 16

typedef struct {
    char name[32];
    uint64_t begin, end;      /* marker addresses */
    uint64_t start;           /* total count at the last begin */
    int inside;
    uint64_t insns, pairs, min, max;
} region_t;

static region_t regions[MAX_REGIONS];
static int n_regions;
static uint64_t total;        /* every instruction executed (inline counter) */
static char out_path[4096];

static void on_begin(unsigned int vcpu, void *udata) {
    region_t *r = (region_t *)udata;
    (void)vcpu;
    r->start = total;         /* the inline add of this instruction ran already: it is counted */
    r->inside = 1;
}

static void on_end(unsigned int vcpu, void *udata) {
    region_t *r = (region_t *)udata;
    (void)vcpu;
    if (!r->inside) return;
    /* both counts include their own instruction: n runs from the begin marker's first instruction
     * to the one just before this */
    uint64_t n = total - r->start;
    r->insns += n;
    r->min = r->pairs == 0 || n < r->min ? n : r->min;
    r->max = n > r->max ? n : r->max;
    r->pairs++;
    r->inside = 0;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        /* the inline add is emitted first, so a marker callback on the same instruction sees it done */
        qemu_plugin_register_vcpu_insn_exec_inline(insn, QEMU_PLUGIN_INLINE_ADD_U64, &total, 1);
        uint64_t pc = qemu_plugin_insn_vaddr(insn);
        for (int k = 0; k < n_regions; k++) {
            if (pc == regions[k].begin)
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_begin, QEMU_PLUGIN_CB_NO_REGS, &regions[k]);
            if (pc == regions[k].end)
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_end, QEMU_PLUGIN_CB_NO_REGS, &regions[k]);
        }
    }
}

static void on_exit_write(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    char line[256];
    FILE *f = out_path[0] ? fopen(out_path, "w") : NULL;
    snprintf(line, sizeof line, "insn_total=%" PRIu64 "\n", total);
    if (f) fputs(line, f); else qemu_plugin_outs(line);
    for (int k = 0; k < n_regions; k++) {
        const region_t *r = &regions[k];
        snprintf(line, sizeof line, "region=%.31s insns=%" PRIu64 " pairs=%" PRIu64 " min=%" PRIu64 " max=%" PRIu64 "\n",
                 r->name, r->insns, r->pairs, r->pairs ? r->min : 0, r->max);
        if (f) fputs(line, f); else qemu_plugin_outs(line);
    }
    if (f) fclose(f);
}

/* Parse "NAME:BEGIN:END" into the next region; 0 on success. */
static int add_region(const char *spec) {
    if (n_regions == MAX_REGIONS) return 1;
    region_t *r = &regions[n_regions];
    const char *c1 = strchr(spec, ':');
    const char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2 || c1 == spec || (size_t)(c1 - spec) >= sizeof r->name) return 1;
    memset(r, 0, sizeof *r);
    memcpy(r->name, spec, (size_t)(c1 - spec));
    char *e1, *e2;
    r->begin = strtoull(c1 + 1, &e1, 0) & ~(uint64_t)1;
    r->end = strtoull(c2 + 1, &e2, 0) & ~(uint64_t)1;
    if (e1 != c2 || *e2 != '\0' || e1 == c1 + 1) return 1;
    n_regions++;
    return 0;
}

__attribute__((visibility("default")))
int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "region=", 7)) {
            if (add_region(argv[i] + 7)) {
                fprintf(stderr, "insn_plugin: bad argument %s (want region=NAME:BEGIN:END)\n", argv[i]);
                return -1;
            }
        } else if (!strncmp(argv[i], "out=", 4)) {
            snprintf(out_path, sizeof out_path, "%s", argv[i] + 4);
        } else {
            fprintf(stderr, "insn_plugin: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_write, NULL);
    return 0;
}
