/* emit_impl.h: the expression emitter shared by emit.c (one kernel as a
 * loop nest) and emit_device.c (lowered device programs).
 *
 * The emitter state is one struct; emit_device.c sets the hooks to print
 * thread indices, vector lanes and per-thread offsets its own way. All
 * names are internal to codegen/.
 */
#ifndef DRAGON_CODEGEN_EMIT_IMPL_H
#define DRAGON_CODEGEN_EMIT_IMPL_H

#include "dragon/codegen.h"

typedef struct cg_emitter cg_emitter;
struct cg_emitter {
  dg_str out;
  const dg_lang *L;
  bool ref;
  dg_status *st;
  bool failed;
  const dg_block *block; /* innermost block, for messages */
  const char *where;     /* message context used when block is NULL */
  DG_VEC(const dg_buffer *) live; /* buffers declared in scope */
  DG_VEC(const char *) buf_names;  /* every buffer's name (vars must differ) */
  int indent;
  int for_depth; /* loops around the statement being emitted */
  bool in_order; /* reference: every loop nest in its own order (emit.c) */
  bool fast;     /* the reference's loop orders and parallel loops (emit.c) */
  /* Ranges of the variables in scope (NULL: none known). A floordiv or
   * floormod by a positive constant whose dividend they prove non-negative
   * prints as C's / or %, the same value without the sign fix-up, which
   * saves the device compiler folding a helper at every index. */
  dg_ranges *ranges;
  /* Hooks (NULL: none). var_hook and load_hook print the node themselves
   * and return true, or return false to let the emitter print it;
   * offset_hook may print "base + " inside the brackets of an access. */
  bool (*var_hook)(cg_emitter *e, const dg_var *v);
  bool (*load_hook)(cg_emitter *e, const dg_expr *x);
  void (*offset_hook)(cg_emitter *e, const dg_buffer *b);
  void *user;
};

void codegen_em_fail(cg_emitter *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void codegen_em_expr(cg_emitter *e, const dg_expr *x);
/* buf[idx...] flattened row-major (with the offset hook's prefix). */
void codegen_em_access(cg_emitter *e, const dg_buffer *b, dg_expr *const *idx, int n);
void codegen_em_var(cg_emitter *e, const dg_var *v);
void codegen_em_buf(cg_emitter *e, const dg_buffer *b);
void codegen_em_int(cg_emitter *e, int64_t v, dg_dtype t);
void codegen_em_indent(cg_emitter *e);
const char *codegen_em_storage_type(const cg_emitter *e, dg_dtype t);
const char *codegen_em_value_type(const cg_emitter *e, dg_dtype t);
bool codegen_em_is_ident(const char *s);
bool codegen_em_name_usable(const cg_emitter *e, const char *s);

/* The C math library's names, shared by the C and CUDA tables (both
 * targets take the same functions; dg_* ones come from the preambles). */
#define CODEGEN_MATH_F32                                                     \
  {                                                                          \
    [DG_MATH_EXP] = "expf", [DG_MATH_LOG] = "logf", [DG_MATH_SQRT] = "sqrtf", \
    [DG_MATH_RSQRT] = "dg_rsqrtf", [DG_MATH_TANH] = "tanhf",                 \
    [DG_MATH_ERF] = "erff", [DG_MATH_POW] = "powf", [DG_MATH_FABS] = "fabsf", \
    [DG_MATH_SIGMOID] = "dg_sigmoidf", [DG_MATH_COS] = "cosf",               \
    [DG_MATH_SIN] = "sinf",                                                  \
  }
#define CODEGEN_MATH_F64                                                     \
  {                                                                          \
    [DG_MATH_EXP] = "exp", [DG_MATH_LOG] = "log", [DG_MATH_SQRT] = "sqrt",   \
    [DG_MATH_RSQRT] = "dg_rsqrt", [DG_MATH_TANH] = "tanh", [DG_MATH_ERF] = "erf", \
    [DG_MATH_POW] = "pow", [DG_MATH_FABS] = "fabs",                          \
    [DG_MATH_SIGMOID] = "dg_sigmoid", [DG_MATH_COS] = "cos", [DG_MATH_SIN] = "sin", \
  }

#endif
