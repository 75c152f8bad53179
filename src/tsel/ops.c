/* ops.c: the table of TSEL edits (name, operand signature, keywords and
 * their types, how many instructions a fold expands to) and the one-to-one
 * short aliases of annotation keys. The table is the language version: a
 * new edit or fold means a new version number in the header line. */
#include <string.h>

#include "tsel/tsel_impl.h"

const tsel_opspec tsel_ops[TSEL_OP_COUNT] = {
    [TSEL_OP_BLOCK] = {"block", "s", {{"func", 's', false}}, 1},
    [TSEL_OP_LOOPS] = {"loops", "Bn", {{0}}, 1},
    [TSEL_OP_CHILDREN] = {"children", "Xn", {{0}}, 1},
    [TSEL_OP_PRODUCERS] = {"producers", "Bn", {{0}}, 1},
    [TSEL_OP_CONSUMERS] = {"consumers", "Bn", {{0}}, 1},
    [TSEL_OP_SPLIT] = {"split", "Lf", {{"unit", 'f', false}, {"nopred", 'f', false}}, 1},
    [TSEL_OP_FUSE] = {"fuse", "L+", {{"unit", 'f', false}}, 1},
    [TSEL_OP_REORDER] = {"reorder", "L+", {{0}}, 1},
    [TSEL_OP_ADD_UNIT_LOOP] = {"add_unit_loop", "X", {{0}}, 1},
    [TSEL_OP_PARALLEL] = {"parallel", "L", {{0}}, 1},
    [TSEL_OP_VECTORIZE] = {"vectorize", "L", {{0}}, 1},
    [TSEL_OP_UNROLL] = {"unroll", "L", {{0}}, 1},
    [TSEL_OP_BIND] = {"bind", "La", {{0}}, 1},
    [TSEL_OP_CACHE_READ] = {"cache_read", "Bipq", {{0}}, 1},
    [TSEL_OP_CACHE_WRITE] = {"cache_write", "Bipq", {{0}}, 1},
    [TSEL_OP_REINDEX] = {"reindex", "Biw", {{0}}, 1},
    [TSEL_OP_COMPUTE_AT] = {"compute_at", "BL", {{"unit", 'f', false}, {"index", 'i', false}}, 1},
    [TSEL_OP_REVERSE_COMPUTE_AT] = {"reverse_compute_at", "BL",
                                    {{"unit", 'f', false}, {"index", 'i', false}}, 1},
    [TSEL_OP_INLINE] = {"inline", "B", {{0}}, 1},
    [TSEL_OP_REVERSE_INLINE] = {"reverse_inline", "B", {{0}}, 1},
    [TSEL_OP_DECOMPOSE_REDUCTION] = {"decompose_reduction", "BL", {{0}}, 1},
    [TSEL_OP_RFACTOR] = {"rfactor", "Li", {{0}}, 1},
    [TSEL_OP_STORAGE_ALIGN] = {"storage_align", "Biiii", {{0}}, 1},
    [TSEL_OP_SET_SCOPE] = {"set_scope", "Bip", {{0}}, 1},
    [TSEL_OP_BLOCKIZE] = {"blockize", "L", {{"unit", 'f', false}}, 1},
    [TSEL_OP_TENSORIZE] = {"tensorize", "Xs", {{"unit", 'f', false}}, 1},
    [TSEL_OP_ANNOTATE] = {"annotate", "Xkv", {{0}}, 1},
    [TSEL_OP_UNANNOTATE] = {"unannotate", "Xk", {{0}}, 1},
    [TSEL_OP_SAMPLE_TILE] = {"sample_tile", "Lc", {{"max", 'i', true}}, 1},
    [TSEL_OP_SAMPLE] = {"sample", "c", {{"", 'v', true}, {"probs", 'F', false}, {"index", 'i', false}}, 1},
    [TSEL_OP_SAMPLE_LOC] = {"sample_loc", "B", {{"", 'v', true}}, 1},
    [TSEL_OP_POSTPROC] = {"postproc", "d", {{0}}, 1},
    [TSEL_OP_RAW] = {"raw", "sghn", {{"decision", 'g', false}, {"kinds", 'k', false}}, 1},
    [TSEL_OP_TILE] = {"tile", "Lc", {{"max", 'i', true}}, 2},
    [TSEL_OP_FUSE_BIND] = {"fuse_bind", "L+a", {{0}}, 0},
    [TSEL_OP_CACHE_READ_AT] = {"cache_read_at", "BipL", {{0}}, 2},
    [TSEL_OP_CACHE_WRITE_AT] = {"cache_write_at", "BipL", {{0}}, 2},
    [TSEL_OP_COOP] = {"coop", "Bc", {{"", 'v', true}}, 2},
    [TSEL_OP_UNROLL_STEPS] = {"unroll_steps", "Bc", {{"", 'v', true}}, 2},
    [TSEL_OP_THREAD_SPLIT] = {"thread_split", "Lc", {{"", 'v', true}}, 3},
};

static const char *const op_names[] = {
#define X(e, s) s,
    TSEL_OP_LIST(X)
#undef X
};
_Static_assert(DG_ARRAY_LEN(op_names) == TSEL_OP_COUNT, "edit table");

bool tsel_op_from_name(const char *s, size_t n, int *op) {
  for (int i = 0; i < TSEL_OP_COUNT; i++) {
    DG_ASSERT(strcmp(op_names[i], tsel_ops[i].name) == 0);
    if (strlen(op_names[i]) == n && memcmp(op_names[i], s, n) == 0) {
      *op = i;
      return true;
    }
  }
  return false;
}

/* intrin: the value names a tensor intrinsic (RewriteTensorize tensorizes
 * the block with it, RewriteReductionBlock passes it to the init block). */
static const struct {
  const char *alias, *key;
  bool intrin;
  tsel_ann_kind kind;
} ann_aliases[] = {
    {"tiling", "meta_schedule.tiling_structure", false, TSEL_ANN_TILING},
    {"coop", "meta_schedule.cooperative_fetch", false, TSEL_ANN_INT},
    {"tx_lo", "meta_schedule.thread_extent_low_inclusive", false, TSEL_ANN_INT},
    {"tx_hi", "meta_schedule.thread_extent_high_inclusive", false, TSEL_ANN_INT},
    {"unroll_explicit", "meta_schedule.unroll_explicit", false, TSEL_ANN_INT},
    {"unroll_implicit", "meta_schedule.unroll_implicit", false, TSEL_ANN_INT},
    {"auto_unroll", "pragma_auto_unroll_max_step", false, TSEL_ANN_INT},
    {"unroll_pragma", "pragma_unroll_explicit", false, TSEL_ANN_INT},
    {"tensorize_as", "meta_schedule.auto_tensorize", true, TSEL_ANN_INTRIN},
    {"tensorize_init", "meta_schedule.auto_tensorize_init", true, TSEL_ANN_INTRIN},
};

/* The keys without an alias that MetaSchedule's rules and postprocessors
 * write (dragon's rule_mlt.c, rule_mlt_tc.c, postproc_unroll.c; TVM's CPU
 * rules), each with the one kind of value they write. */
static const struct {
  const char *key;
  tsel_ann_kind kind;
} ann_keys[] = {
    {"double_buffer_scope", TSEL_ANN_INT},
    {"meta_schedule.parallel", TSEL_ANN_INT},
    {"meta_schedule.vectorize", TSEL_ANN_INT},
    {"software_pipeline_async_stages", TSEL_ANN_INTS},
    {"software_pipeline_order", TSEL_ANN_INTS},
    {"software_pipeline_stage", TSEL_ANN_INTS},
    {"tirx.manifest_shared_memory_local_stage", TSEL_ANN_INT},
    {"warp_execution", TSEL_ANN_INT},
};

/* MultiLevelTiling's structures (TVM's CPU and GPU rules; dragon's CUDA
 * rules, the tensor-core one included, write the second), sorted. */
static const char *const ann_tilings[] = {"SSRSRS", "SSSRRSRS"};

int tsel_ann_tiling_count(void) { return (int)DG_ARRAY_LEN(ann_tilings); }
const char *tsel_ann_tiling_at(int i) { return ann_tilings[i]; }

int tsel_ann_key_count(void) { return (int)DG_ARRAY_LEN(ann_keys); }
const char *tsel_ann_key_at(int i) { return ann_keys[i].key; }

tsel_ann_kind tsel_ann_value_kind(const char *word) {
  for (size_t i = 0; i < DG_ARRAY_LEN(ann_aliases); i++)
    if (strcmp(ann_aliases[i].alias, word) == 0) return ann_aliases[i].kind;
  for (size_t i = 0; i < DG_ARRAY_LEN(ann_keys); i++)
    if (strcmp(ann_keys[i].key, word) == 0) return ann_keys[i].kind;
  return TSEL_ANN_ANY;
}

const char *tsel_ann_alias(const char *key) {
  for (size_t i = 0; i < DG_ARRAY_LEN(ann_aliases); i++)
    if (strcmp(ann_aliases[i].key, key) == 0) return ann_aliases[i].alias;
  return NULL;
}

const char *tsel_ann_full(const char *alias) {
  for (size_t i = 0; i < DG_ARRAY_LEN(ann_aliases); i++)
    if (strcmp(ann_aliases[i].alias, alias) == 0) return ann_aliases[i].key;
  return NULL;
}

bool tsel_ann_names_intrin(const char *alias) {
  for (size_t i = 0; i < DG_ARRAY_LEN(ann_aliases); i++)
    if (strcmp(ann_aliases[i].alias, alias) == 0) return ann_aliases[i].intrin;
  return false;
}

const tsel_kw *tsel_edit_kw(const tsel_edit *e, const char *key) {
  for (int i = 0; i < e->n_kws; i++)
    if (strcmp(e->kws[i].key, key) == 0) return &e->kws[i];
  return NULL;
}

int tsel_sample_index(const tsel_edit *e) {
  const tsel_kw *ix = tsel_edit_kw(e, "index");
  if (ix) return (int)ix->val.i;
  const tsel_kw *v = tsel_edit_kw(e, "");
  const tsel_val *c = &e->args[e->op == TSEL_OP_SAMPLE ? 0 : 1];
  for (int i = 0; v && i < c->n; i++)
    if (c->items[i].i == v->val.i) return i;
  return -1;
}
