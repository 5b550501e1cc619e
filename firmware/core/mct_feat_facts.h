/* mct_feat_facts.h - the feature pipeline's lists and its config struct as tables for the host (the Cython
 * binding), in mct_facts.h's types: Python builds its enums and the config's numpy dtype from these. Host only. */
#ifndef MCT_FEAT_FACTS_H
#define MCT_FEAT_FACTS_H

#include <stddef.h>

#include "mct_facts.h"
#include "mct_feat.h"

#define MCT_FEAT_FACT(PREFIX, NAME, VALUE) {#NAME, PREFIX #NAME, VALUE, {0, 0, 0, 0}},
#define MCT_FEAT_FACT_KIND(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_", NAME, VALUE)
#define MCT_FEAT_FACT_WIN(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_WIN_", NAME, VALUE)
#define MCT_FEAT_FACT_MEL(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_MEL_", NAME, VALUE)
#define MCT_FEAT_FACT_MELNORM(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_MELNORM_", NAME, VALUE)
#define MCT_FEAT_FACT_DCT(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_DCT_", NAME, VALUE)
#define MCT_FEAT_FACT_SPEC(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_SPEC_", NAME, VALUE)
#define MCT_FEAT_FACT_FILTER(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_FILTER_", NAME, VALUE)
#define MCT_FEAT_FACT_STAT(NAME, VALUE) MCT_FEAT_FACT("MCT_FEAT_STAT_", NAME, VALUE)

static const mct_fact_entry mct_feat_fact_kinds[] = {MCT_FEAT_KIND_LIST(MCT_FEAT_FACT_KIND)};
static const mct_fact_entry mct_feat_fact_windows[] = {MCT_FEAT_WINDOW_LIST(MCT_FEAT_FACT_WIN)};
static const mct_fact_entry mct_feat_fact_mels[] = {MCT_FEAT_MEL_LIST(MCT_FEAT_FACT_MEL)};
static const mct_fact_entry mct_feat_fact_melnorms[] = {MCT_FEAT_MELNORM_LIST(MCT_FEAT_FACT_MELNORM)};
static const mct_fact_entry mct_feat_fact_dcts[] = {MCT_FEAT_DCT_LIST(MCT_FEAT_FACT_DCT)};
static const mct_fact_entry mct_feat_fact_spectra[] = {MCT_FEAT_SPECTRUM_LIST(MCT_FEAT_FACT_SPEC)};
static const mct_fact_entry mct_feat_fact_filters[] = {MCT_FEAT_FILTER_LIST(MCT_FEAT_FACT_FILTER)};
static const mct_fact_entry mct_feat_fact_stats[] = {MCT_FEAT_STAT_LIST(MCT_FEAT_FACT_STAT)};

/* The pipeline's lists. */
static const mct_fact_list mct_feat_fact_lists[] = {
    {"feat_kind", "", mct_feat_fact_kinds, MCT_FACT_N(mct_feat_fact_kinds)},
    {"feat_window", "", mct_feat_fact_windows, MCT_FACT_N(mct_feat_fact_windows)},
    {"feat_mel", "", mct_feat_fact_mels, MCT_FACT_N(mct_feat_fact_mels)},
    {"feat_melnorm", "", mct_feat_fact_melnorms, MCT_FACT_N(mct_feat_fact_melnorms)},
    {"feat_dct", "", mct_feat_fact_dcts, MCT_FACT_N(mct_feat_fact_dcts)},
    {"feat_spectrum", "", mct_feat_fact_spectra, MCT_FACT_N(mct_feat_fact_spectra)},
    {"feat_filter", "", mct_feat_fact_filters, MCT_FACT_N(mct_feat_fact_filters)},
    {"feat_stat", "", mct_feat_fact_stats, MCT_FACT_N(mct_feat_fact_stats)},
};
#define MCT_FEAT_FACT_N_LISTS MCT_FACT_N(mct_feat_fact_lists)

/* The config's fields (an array field has bytes = count * sizeof its type). */
#define MCT_FEAT_FACT_FIELD(T, NAME, KIND, COUNT) \
    {#NAME, (uint32_t)offsetof(mct_feat_cfg, NAME), (uint32_t)sizeof(((mct_feat_cfg *)0)->NAME), KIND},
static const mct_fact_field mct_feat_fact_fields[] = {MCT_FEAT_FIELDS(MCT_FEAT_FACT_FIELD)};
/* struct mct_feat_cfg as a fact struct. */
static const mct_fact_struct mct_feat_fact_struct = {"mct_feat_cfg", (uint32_t)sizeof(mct_feat_cfg),
                                                     mct_feat_fact_fields, MCT_FACT_N(mct_feat_fact_fields)};

#endif /* MCT_FEAT_FACTS_H */
