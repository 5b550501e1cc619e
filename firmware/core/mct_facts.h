/* mct_facts.h - the core's lists and struct layouts as tables, for the host (the Cython binding and the C
 * tests): Python builds its enums and numpy dtypes from these, so nothing of the core is typed twice.
 * Host only: on AVR the names would take RAM. Everything here is generated from mct_lists.h.
 */
#ifndef MCT_FACTS_H
#define MCT_FACTS_H

#include <stddef.h>

#include "mct.h"

/* One entry of a list: its name (as in the list), the C identifier, its value and up to four attributes
 * (which ones: the list's attrs string, names separated by spaces). */
typedef struct mct_fact_entry {
    const char *name;
    const char *c_name;
    int32_t value;
    int32_t attr[4];
} mct_fact_entry;

/* One list: its name, its attribute names, its entries. */
typedef struct mct_fact_list {
    const char *name;
    const char *attrs;
    const mct_fact_entry *entries;
    uint32_t count;
} mct_fact_list;

/* One field of a struct: name, byte offset, bytes, numpy kind ('u' unsigned, 'i' signed, 'f' float). */
typedef struct mct_fact_field {
    const char *name;
    uint32_t offset;
    uint32_t size;
    char kind;
} mct_fact_field;

/* One struct: its name, sizeof, its fields in declaration order. */
typedef struct mct_fact_struct {
    const char *name;
    uint32_t size;
    const mct_fact_field *fields;
    uint32_t count;
} mct_fact_struct;

#define MCT_FACT_CALL_PARAM 0
#define MCT_FACT_CALL_CONST 1
#define MCT_FACT_CALL_QOP 2
#define MCT_FACT_CALL_NET 3
#define MCT_FACT_OP(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) \
    {#NAME, "MCT_OP_" #NAME, VALUE, {MCT_FACT_CALL_##CALL, IN_I8, OUT_I8, 0}},
#define MCT_FACT_ACT(NAME, VALUE, LAYER, GATE) {#NAME, "MCT_ACT_" #NAME, VALUE, {LAYER, GATE, 0, 0}},
#define MCT_FACT_LOSS(NAME, VALUE) {#NAME, "MCT_LOSS_" #NAME, VALUE, {0, 0, 0, 0}},
#define MCT_FACT_OPT(NAME, VALUE, SLOTS) {#NAME, "MCT_OPT_" #NAME, VALUE, {SLOTS, 0, 0, 0}},
#define MCT_FACT_SCHEDULE(NAME, VALUE) {#NAME, "MCT_LR_" #NAME, VALUE, {0, 0, 0, 0}},
#define MCT_FACT_STORAGE(NAME, VALUE) {#NAME, "MCT_STORE_" #NAME, VALUE, {0, 0, 0, 0}},
#define MCT_FACT_STATUS(NAME, VALUE) {#NAME, "MCT_" #NAME, VALUE, {0, 0, 0, 0}},
#define MCT_FACT_FORMAT(NAME, VALUE) {#NAME, "MCT_FORMAT_" #NAME, VALUE, {0, 0, 0, 0}},
#define MCT_FACT_CMD(NAME, VALUE) {#NAME, "MCT_CMD_" #NAME, VALUE, {0, 0, 0, 0}},
#define MCT_FACT_REPLY(NAME, VALUE) {#NAME, "MCT_ST_" #NAME, VALUE, {0, 0, 0, 0}},

static const mct_fact_entry mct_fact_ops[] = {MCT_OP_LIST(MCT_FACT_OP)};
static const mct_fact_entry mct_fact_acts[] = {MCT_ACT_LIST(MCT_FACT_ACT)};
static const mct_fact_entry mct_fact_losses[] = {MCT_LOSS_LIST(MCT_FACT_LOSS)};
static const mct_fact_entry mct_fact_opts[] = {MCT_OPT_LIST(MCT_FACT_OPT)};
static const mct_fact_entry mct_fact_schedules[] = {MCT_SCHEDULE_LIST(MCT_FACT_SCHEDULE)};
static const mct_fact_entry mct_fact_storages[] = {MCT_STORAGE_LIST(MCT_FACT_STORAGE)};
static const mct_fact_entry mct_fact_statuses[] = {MCT_STATUS_LIST(MCT_FACT_STATUS)};
static const mct_fact_entry mct_fact_formats[] = {MCT_FORMAT_LIST(MCT_FACT_FORMAT)};
static const mct_fact_entry mct_fact_cmds[] = {MCT_CMD_LIST(MCT_FACT_CMD)};
static const mct_fact_entry mct_fact_replies[] = {MCT_REPLY_LIST(MCT_FACT_REPLY)};

#define MCT_FACT_N(a) ((uint32_t)(sizeof(a) / sizeof((a)[0])))
/* Every list (the call attribute of ops: 0 PARAM, 1 CONST, 2 QOP, 3 NET, as in MCT_OP_LIST). */
static const mct_fact_list mct_fact_lists[] = {
    {"op", "call reads_i8 writes_i8", mct_fact_ops, MCT_FACT_N(mct_fact_ops)},
    {"act", "layer gate", mct_fact_acts, MCT_FACT_N(mct_fact_acts)},
    {"loss", "", mct_fact_losses, MCT_FACT_N(mct_fact_losses)},
    {"opt", "slots", mct_fact_opts, MCT_FACT_N(mct_fact_opts)},
    {"schedule", "", mct_fact_schedules, MCT_FACT_N(mct_fact_schedules)},
    {"storage", "", mct_fact_storages, MCT_FACT_N(mct_fact_storages)},
    {"status", "", mct_fact_statuses, MCT_FACT_N(mct_fact_statuses)},
    {"format", "", mct_fact_formats, MCT_FACT_N(mct_fact_formats)},
    {"cmd", "", mct_fact_cmds, MCT_FACT_N(mct_fact_cmds)},
    {"reply", "", mct_fact_replies, MCT_FACT_N(mct_fact_replies)},
};
#define MCT_FACT_N_LISTS MCT_FACT_N(mct_fact_lists)

/* 'f' for float fields, else 'u' (the structs hold unsigned integers and floats only). */
#define MCT_FACT_FIELD(S, T, NAME, KIND) {#NAME, (uint32_t)offsetof(S, NAME), (uint32_t)sizeof(((S *)0)->NAME), KIND},
#define MCT_FACT_LAYER_FIELD(T, NAME, KIND) MCT_FACT_FIELD(mct_layer, T, NAME, KIND)
#define MCT_FACT_OPT_FIELD(T, NAME, KIND) MCT_FACT_FIELD(mct_opt, T, NAME, KIND)
#define MCT_FACT_TS_FIELD(T, NAME, KIND) MCT_FACT_FIELD(mct_train_state, T, NAME, KIND)
static const mct_fact_field mct_fact_layer_fields[] = {MCT_LAYER_FIELDS(MCT_FACT_LAYER_FIELD)};
static const mct_fact_field mct_fact_opt_fields[] = {MCT_OPT_FIELDS(MCT_FACT_OPT_FIELD)};
static const mct_fact_field mct_fact_ts_fields[] = {MCT_TRAIN_STATE_FIELDS(MCT_FACT_TS_FIELD)};

/* The structs the host writes byte for byte. */
static const mct_fact_struct mct_fact_structs[] = {
    {"mct_layer", (uint32_t)sizeof(mct_layer), mct_fact_layer_fields, MCT_FACT_N(mct_fact_layer_fields)},
    {"mct_opt", (uint32_t)sizeof(mct_opt), mct_fact_opt_fields, MCT_FACT_N(mct_fact_opt_fields)},
    {"mct_train_state", (uint32_t)sizeof(mct_train_state), mct_fact_ts_fields, MCT_FACT_N(mct_fact_ts_fields)},
};
#define MCT_FACT_N_STRUCTS MCT_FACT_N(mct_fact_structs)

#endif /* MCT_FACTS_H */
