/* emit_device.c: a lowered program (lower.h) as source text, through a
 * language table: CUDA C kernels, or C that emulates them on the CPU.
 *
 * CUDA: one `extern "C" __global__` function per launch with typed pointer
 * parameters, __launch_bounds__, the hardware indices read once into
 * dg_bx..dg_tz (int32, so index arithmetic stays signed), __shared__ and
 * per-thread arrays, vector loads/stores for the vector stores the lowering
 * marked (a raw copy of 2..16 bytes, or float2/4 and int2/4 arithmetic lane
 * by lane), warp-shuffle allreduce, tensor-core operations (LW_WMMA) as
 * nvcuda::wmma calls on per-warp fragment arrays, cp.async copies with
 * their commit and wait statements (the table's helpers).
 *
 * C: one static function per launch. Blocks are serial loops over the
 * grid. The body is split at barriers into phases, each phase a loop over
 * the threads of the block; loops and conditions that contain a barrier
 * stay outside the thread loops, so they must not depend on the thread
 * index (an error otherwise: on the GPU that would hang). Local arrays get
 * one slot per thread (indexed by dg_tid); shared arrays one per block. The
 * allreduce runs between phases over every thread's value, in the order of
 * operations of the shuffle tree, so the C numbers are the GPU's numbers.
 * A tensor-core operation runs its block's own loops on lane 0 of the warp,
 * over fragment arrays kept per warp (dg_wid). An asynchronous copy is a
 * plain store and its commit and wait are comments: the threads of a phase
 * run to its end before the next phase, so a copy is complete at the
 * barrier that follows it, as cp.async is after its wait. A host entry
 * allocates the program's intermediate buffers and runs the launches in
 * order.
 *
 * It assumes a program that lower_program produced.
 */
#include <inttypes.h>
#include <string.h>

#include "codegen/emit_impl.h"
#include "dragon/lower.h"

typedef struct {
  cg_emitter e;
  const lw_program *p;
  const lw_kernel *k;
  bool emulate;
  int64_t nthreads;
  /* while printing one lane of a vector store */
  const int *vec_ids; /* load ordinals read through vector registers */
  int n_vec_ids;
  int lane;           /* -1: not in a vector store */
  int load_ord;
  dg_ranges ranges;   /* the hardware indices and the loops around them */
} dev;

static const char *const tag_names[DG_TAG_COUNT] = {
    [DG_TAG_BLOCK_X] = "dg_bx", [DG_TAG_BLOCK_Y] = "dg_by", [DG_TAG_BLOCK_Z] = "dg_bz",
    [DG_TAG_THREAD_X] = "dg_tx", [DG_TAG_THREAD_Y] = "dg_ty", [DG_TAG_THREAD_Z] = "dg_tz",
};

static dev *D(cg_emitter *e) { return e->user; }

static bool var_hook(cg_emitter *e, const dg_var *v) {
  const lw_kernel *k = D(e)->k;
  for (int t = 0; t < DG_TAG_COUNT; t++)
    if (k->tag_var[t] == v && tag_names[t]) {
      dg_str_puts(&e->out, tag_names[t]);
      return true;
    }
  return false;
}

static bool is_fragment(const dg_buffer *b) {
  return b->scope == DG_SCOPE_WMMA_A || b->scope == DG_SCOPE_WMMA_B || b->scope == DG_SCOPE_WMMA_ACC;
}

static void offset_hook(cg_emitter *e, const dg_buffer *b) {
  if (D(e)->emulate && b->scope == DG_SCOPE_LOCAL)
    dg_str_printf(&e->out, "dg_tid * %" PRId64 " + ", ir_buffer_numel(b));
  else if (D(e)->emulate && is_fragment(b)) /* one fragment array per warp */
    dg_str_printf(&e->out, "dg_wid * %" PRId64 " + ", ir_buffer_numel(b));
}

static int count_loads(const dg_expr *x) {
  if (!x) return 0;
  int n = x->kind == DG_EXPR_LOAD;
  if (x->kind == DG_EXPR_LOAD || x->kind == DG_EXPR_CALL) {
    for (int i = 0; i < x->nargs; i++) n += count_loads(x->args[i]);
    return n;
  }
  return n + count_loads(x->a) + count_loads(x->b) + count_loads(x->c);
}

static bool load_hook(cg_emitter *e, const dg_expr *x) {
  dev *d = D(e);
  if (d->lane < 0) return false;
  int ord = d->load_ord++;
  for (int i = 0; i < d->n_vec_ids; i++)
    if (d->vec_ids[i] == ord) {
      dg_str_printf(&e->out, "dg_vl%d.%s", i, e->L->lane_field[d->lane]);
      for (int j = 0; j < x->nargs; j++) d->load_ord += count_loads(x->args[j]);
      return true;
    }
  return false;
}

/* Load number `want` of x (in nth_load's order) and the condition under
 * which x evaluates it (*guard: NULL where always): the condition of each
 * select around it (negated in the else arm) and the left side of each
 * && or || it is the right side of. A load hoisted out of x into a vector
 * register must run under that condition only: a padded input's select
 * keeps an out-of-bounds address from being read. */
static const dg_expr *nth_load_guarded(dg_func *f, const dg_expr *x, int *ord, int want,
                                       dg_expr *cond, dg_expr **guard) {
  if (!x) return NULL;
  if (x->kind == DG_EXPR_LOAD && (*ord)++ == want) {
    *guard = cond;
    return x;
  }
  const dg_expr *r = NULL;
  if (x->kind == DG_EXPR_LOAD || x->kind == DG_EXPR_CALL) {
    for (int i = 0; i < x->nargs && !r; i++) r = nth_load_guarded(f, x->args[i], ord, want, cond, guard);
    return r;
  }
  dg_expr *cb = cond, *cc = cond;
  if (x->kind == DG_EXPR_SELECT) {
    dg_expr *a = (dg_expr *)x->a;
    cb = cond ? ir_bin(f, DG_EXPR_AND, cond, a) : a;
    cc = cond ? ir_bin(f, DG_EXPR_AND, cond, ir_not(f, a)) : ir_not(f, a);
  } else if (x->kind == DG_EXPR_AND || x->kind == DG_EXPR_OR) {
    dg_expr *a = x->kind == DG_EXPR_AND ? (dg_expr *)x->a : ir_not(f, (dg_expr *)x->a);
    cb = cond ? ir_bin(f, DG_EXPR_AND, cond, a) : a;
  }
  r = nth_load_guarded(f, x->a, ord, want, cond, guard);
  if (!r) r = nth_load_guarded(f, x->b, ord, want, cb, guard);
  if (!r) r = nth_load_guarded(f, x->c, ord, want, cc, guard);
  return r;
}

/* ---- small printing helpers ------------------------------------------------- */

static void line(dev *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(dev *d, const char *fmt, ...) {
  codegen_em_indent(&d->e);
  va_list ap;
  va_start(ap, fmt);
  dg_str_vprintf(&d->e.out, fmt, ap);
  va_end(ap);
  dg_str_putc(&d->e.out, '\n');
}

static bool is_f16(dg_dtype t) { return t == DG_F16; }

static const char *suffix(dg_dtype t) {
  switch (t) {
    case DG_I64: return "_i64";
    case DG_F16:
    case DG_F32: return "_f32";
    case DG_F64: return "_f64";
    default: return "_i32";
  }
}

/* "a op b" as the emitter computes it (f16 rounded after the operation). */
static void comb(dev *d, dg_expr_kind op, dg_dtype t, const char *a, const char *b) {
  const dg_lang *L = d->e.L;
  dg_str *o = &d->e.out;
  if (op == DG_EXPR_MIN || op == DG_EXPR_MAX) {
    dg_str_printf(o, "%s%s(%s, %s)", op == DG_EXPR_MIN ? L->min_fn : L->max_fn, suffix(t), a, b);
    return;
  }
  const char *sym = op == DG_EXPR_ADD ? "+" : "*";
  if (is_f16(t)) dg_str_printf(o, "%s((%s %s %s))", L->round_half, a, sym, b);
  else if (t == DG_I8 || t == DG_BOOL) dg_str_printf(o, "((int8_t)(%s %s %s))", a, sym, b);
  else dg_str_printf(o, "(%s %s %s)", a, sym, b);
}

/* NAME[index] as a value / as the target of a store of `val`. */
static void put_elem_load(dev *d, const dg_buffer *b, const char *index) {
  dg_str *o = &d->e.out;
  if (is_f16(b->dtype)) dg_str_printf(o, "%s(", d->e.L->half_to_float);
  codegen_em_buf(&d->e, b);
  dg_str_printf(o, "[%s]", index);
  if (is_f16(b->dtype)) dg_str_putc(o, ')');
}

static void put_elem_store(dev *d, const dg_buffer *b, const char *index, const char *val) {
  dg_str *o = &d->e.out;
  codegen_em_indent(&d->e);
  codegen_em_buf(&d->e, b);
  dg_str_printf(o, "[%s] = ", index);
  if (is_f16(b->dtype)) dg_str_printf(o, "%s(%s);\n", d->e.L->float_to_half, val);
  else dg_str_printf(o, "%s;\n", val);
}

static bool uses_thread(const dev *d, const dg_expr *x) {
  for (int t = DG_TAG_THREAD_X; t <= DG_TAG_THREAD_Z; t++)
    if (d->k->tag_var[t] && ir_expr_uses_var(x, d->k->tag_var[t])) return true;
  return false;
}

/* ---- statements --------------------------------------------------------------- */

static void emit_stmt(dev *d, const lw_stmt *s);

static void scalar_store(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  bool conv = is_f16(s->buf->dtype);
  codegen_em_indent(e);
  codegen_em_access(e, s->buf, s->idx, s->nidx);
  dg_str_puts(&e->out, " = ");
  if (conv) dg_str_printf(&e->out, "%s(", e->L->float_to_half);
  codegen_em_expr(e, s->value);
  if (conv) dg_str_putc(&e->out, ')');
  dg_str_puts(&e->out, ";\n");
}

static void put_loop_head(dev *d, const dg_var *v, int64_t extent) {
  cg_emitter *e = &d->e;
  codegen_em_indent(e);
  dg_str_printf(&e->out, "for (%s ", codegen_em_value_type(e, v->dtype));
  codegen_em_var(e, v);
  dg_str_puts(&e->out, " = 0; ");
  codegen_em_var(e, v);
  dg_str_puts(&e->out, " < ");
  codegen_em_int(e, extent, v->dtype == DG_I64 ? DG_I64 : DG_I32);
  dg_str_puts(&e->out, "; ");
  codegen_em_var(e, v);
  dg_str_puts(&e->out, "++) {\n");
}

/* &buf[idx with the lane at 0] */
static void put_lane0_addr(dev *d, const dg_buffer *b, dg_expr *const *idx, int n,
                           const dg_var *lane) {
  dg_func *f = d->p->f;
  dg_subst z = {lane, ir_int_t(f, 0, lane->dtype)};
  dg_expr **i0 = DG_ANEWN(f->arena, dg_expr *, n > 0 ? n : 1);
  for (int i = 0; i < n; i++) i0[i] = ir_subst_expr(f, idx[i], &z, 1);
  dg_str_puts(&d->e.out, "(&");
  codegen_em_access(&d->e, b, i0, n);
  dg_str_putc(&d->e.out, ')');
}

/* A cp.async store: NAME<bytes>(&dst, &src), the lane-0 addresses of a
 * vector store. */
static void async_store(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  const dg_expr *v = s->value;
  int bytes = s->lanes * dg_dtype_bytes(s->buf->dtype);
  codegen_em_indent(e);
  dg_str_printf(&e->out, "%s%d(", e->L->cp_async_fn, bytes);
  if (s->lanes > 1) {
    put_lane0_addr(d, s->buf, s->idx, s->nidx, s->lane_var);
    dg_str_puts(&e->out, ", ");
    put_lane0_addr(d, v->buf, v->args, v->nargs, s->lane_var);
  } else {
    dg_str_puts(&e->out, "&");
    codegen_em_access(e, s->buf, s->idx, s->nidx);
    dg_str_puts(&e->out, ", &");
    codegen_em_access(e, v->buf, v->args, v->nargs);
  }
  dg_str_puts(&e->out, ");\n");
}

static void vector_store(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  const dg_lang *L = e->L;
  dg_func *f = d->p->f;
  int lanes = s->lanes;
  int bytes = lanes * dg_dtype_bytes(s->buf->dtype);
  const dg_expr *v = s->value;
  /* a raw copy of contiguous lanes */
  if (v->kind == DG_EXPR_LOAD && v->buf->dtype == s->buf->dtype && s->n_vloads >= 1 &&
      s->vloads[0] == 0 && bytes <= 16 && L->vec_bits[bytes]) {
    const char *vt = L->vec_bits[bytes];
    codegen_em_indent(e);
    dg_str_printf(&e->out, "*(%s *)", vt);
    put_lane0_addr(d, s->buf, s->idx, s->nidx, s->lane_var);
    dg_str_printf(&e->out, " = *(const %s *)", vt);
    put_lane0_addr(d, v->buf, v->args, v->nargs, s->lane_var);
    dg_str_puts(&e->out, ";\n");
    return;
  }
  const char *vt = s->buf->dtype == DG_F32 ? L->vec_float[lanes]
                   : s->buf->dtype == DG_I32 ? L->vec_int[lanes] : NULL;
  if (vt && L->lane_field[lanes - 1]) {
    int *ids = DG_ANEWN(f->arena, int, s->n_vloads > 0 ? s->n_vloads : 1);
    int n_ids = 0;
    line(d, "{");
    e->indent++;
    for (int i = 0; i < s->n_vloads; i++) {
      int ord = 0;
      dg_expr *guard = NULL;
      const dg_expr *ld = nth_load_guarded(f, v, &ord, s->vloads[i], NULL, &guard);
      if (!ld || ld->buf->dtype != s->buf->dtype) continue;
      /* a conditional load whose condition differs between lanes stays in
       * each lane's expression (read there only where the lane's condition
       * holds); one whose condition is the lanes' own is read under it */
      if (guard && ir_expr_uses_var(guard, s->lane_var)) continue;
      codegen_em_indent(e);
      if (guard) {
        dg_str_printf(&e->out, "%s dg_vl%d = {0};\n", vt, n_ids);
        codegen_em_indent(e);
        dg_str_puts(&e->out, "if (");
        codegen_em_expr(e, guard);
        dg_str_printf(&e->out, ") dg_vl%d = *(const %s *)", n_ids, vt);
      } else {
        dg_str_printf(&e->out, "const %s dg_vl%d = *(const %s *)", vt, n_ids, vt);
      }
      put_lane0_addr(d, ld->buf, ld->args, ld->nargs, s->lane_var);
      dg_str_puts(&e->out, ";\n");
      ids[n_ids++] = s->vloads[i];
    }
    line(d, "%s dg_vs;", vt);
    for (int l = 0; l < lanes; l++) {
      dg_subst m = {s->lane_var, ir_int_t(f, l, s->lane_var->dtype)};
      dg_expr *vl = ir_subst_expr(f, s->value, &m, 1);
      codegen_em_indent(e);
      dg_str_printf(&e->out, "dg_vs.%s = ", L->lane_field[l]);
      d->vec_ids = ids;
      d->n_vec_ids = n_ids;
      d->lane = l;
      d->load_ord = 0;
      codegen_em_expr(e, vl);
      d->lane = -1;
      dg_str_puts(&e->out, ";\n");
    }
    codegen_em_indent(e);
    dg_str_printf(&e->out, "*(%s *)", vt);
    put_lane0_addr(d, s->buf, s->idx, s->nidx, s->lane_var);
    dg_str_puts(&e->out, " = dg_vs;\n");
    e->indent--;
    line(d, "}");
    return;
  }
  /* lane by lane */
  if (L->unroll_pragma) line(d, "%s", L->unroll_pragma);
  put_loop_head(d, s->lane_var, lanes);
  e->indent++;
  scalar_store(d, s);
  e->indent--;
  line(d, "}");
}

static void cuda_allreduce(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  const dg_lang *L = e->L;
  dg_dtype t = s->src->dtype;
  int n = (int)s->red_extent;
  char mask[32];
  if (d->nthreads >= 32) snprintf(mask, sizeof mask, "0xffffffffu");
  else snprintf(mask, sizeof mask, "0x%xu", (unsigned)((1ull << d->nthreads) - 1));
  char buf[256];
  line(d, "{  /* allreduce(%s) over %s (%d threads) */", dg_expr_kind_name(s->combiner),
       dg_thread_tag_name(s->red_tag), n);
  e->indent++;
  codegen_em_indent(e);
  dg_str_printf(&e->out, "%s dg_red = ", codegen_em_value_type(e, t));
  put_elem_load(d, s->src, "0");
  dg_str_puts(&e->out, ";\n");
  int width = n <= 32 ? n : 32;
  for (int off = width / 2; off > 0; off /= 2) {
    snprintf(buf, sizeof buf, L->shfl_down_fmt, mask, "dg_red", off, width);
    codegen_em_indent(e);
    dg_str_puts(&e->out, "dg_red = ");
    comb(d, s->combiner, t, "dg_red", buf);
    dg_str_puts(&e->out, ";\n");
  }
  if (n > 32) {
    int w = n / 32;
    line(d, "if ((dg_tid & 31) == 0) {");
    e->indent++;
    put_elem_store(d, s->scratch, "dg_tid >> 5", "dg_red");
    e->indent--;
    line(d, "}");
    line(d, "%s", L->barrier);
    codegen_em_indent(e);
    dg_str_puts(&e->out, "dg_red = ");
    snprintf(buf, sizeof buf, "(dg_tid & 31) < %d ? (dg_tid & 31) : 0", w);
    put_elem_load(d, s->scratch, buf);
    dg_str_puts(&e->out, ";\n");
    for (int off = w / 2; off > 0; off /= 2) {
      snprintf(buf, sizeof buf, L->shfl_down_fmt, mask, "dg_red", off, 32);
      codegen_em_indent(e);
      dg_str_puts(&e->out, "dg_red = ");
      comb(d, s->combiner, t, "dg_red", buf);
      dg_str_puts(&e->out, ";\n");
    }
  }
  snprintf(buf, sizeof buf, L->shfl_fmt, mask, "dg_red", 0, width);
  line(d, "dg_red = %s;", buf);
  if (n > 32) line(d, "%s", L->barrier);
  put_elem_store(d, s->dst, "0", "dg_red");
  e->indent--;
  line(d, "}");
}

/* The same tree of operations, over every thread's value, between phases. */
static void emulated_allreduce(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  dg_dtype t = s->src->dtype;
  int64_t n = s->red_extent;
  const char *vt = codegen_em_value_type(e, t);
  line(d, "{  /* allreduce(%s) over %s (%" PRId64 " threads), as the shuffle tree */",
       dg_expr_kind_name(s->combiner), dg_thread_tag_name(s->red_tag), n);
  e->indent++;
  line(d, "for (int32_t dg_g = 0; dg_g < %" PRId64 "; dg_g++) {", d->nthreads / n);
  e->indent++;
  line(d, "%s dg_red[%" PRId64 "];", vt, n);
  line(d, "for (int32_t dg_r = 0; dg_r < %" PRId64 "; dg_r++) {", n);
  e->indent++;
  codegen_em_indent(e);
  dg_str_puts(&e->out, "dg_red[dg_r] = ");
  char idx[96];
  snprintf(idx, sizeof idx, "(dg_g * %" PRId64 " + dg_r) * %" PRId64, n, ir_buffer_numel(s->src));
  put_elem_load(d, s->src, idx);
  dg_str_puts(&e->out, ";\n");
  e->indent--;
  line(d, "}");
  int64_t width = n <= 32 ? n : 32;
  int64_t w = n <= 32 ? 1 : n / 32;
  line(d, "for (int32_t dg_w = 0; dg_w < %" PRId64 "; dg_w++) {", w);
  e->indent++;
  line(d, "for (int32_t dg_o = %" PRId64 "; dg_o > 0; dg_o /= 2) {", width / 2);
  e->indent++;
  line(d, "for (int32_t dg_l = 0; dg_l < dg_o; dg_l++) {");
  e->indent++;
  codegen_em_indent(e);
  dg_str_printf(&e->out, "dg_red[dg_w * %" PRId64 " + dg_l] = ", width);
  char a[64], b[64];
  snprintf(a, sizeof a, "dg_red[dg_w * %" PRId64 " + dg_l]", width);
  snprintf(b, sizeof b, "dg_red[dg_w * %" PRId64 " + dg_l + dg_o]", width);
  comb(d, s->combiner, t, a, b);
  dg_str_puts(&e->out, ";\n");
  e->indent--;
  line(d, "}");
  e->indent--;
  line(d, "}");
  e->indent--;
  line(d, "}");
  if (n > 32) {
    line(d, "for (int32_t dg_w = 1; dg_w < %" PRId64 "; dg_w++) dg_red[dg_w] = dg_red[dg_w * 32];", w);
    line(d, "for (int32_t dg_o = %" PRId64 "; dg_o > 0; dg_o /= 2) {", w / 2);
    e->indent++;
    line(d, "for (int32_t dg_l = 0; dg_l < dg_o; dg_l++) {");
    e->indent++;
    codegen_em_indent(e);
    dg_str_puts(&e->out, "dg_red[dg_l] = ");
    comb(d, s->combiner, t, "dg_red[dg_l]", "dg_red[dg_l + dg_o]");
    dg_str_puts(&e->out, ";\n");
    e->indent--;
    line(d, "}");
    e->indent--;
    line(d, "}");
  }
  line(d, "for (int32_t dg_r = 0; dg_r < %" PRId64 "; dg_r++) {", n);
  e->indent++;
  snprintf(idx, sizeof idx, "(dg_g * %" PRId64 " + dg_r) * %" PRId64, n, ir_buffer_numel(s->dst));
  put_elem_store(d, s->dst, idx, "dg_red[0]");
  e->indent--;
  line(d, "}");
  e->indent--;
  line(d, "}");
  e->indent--;
  line(d, "}");
}

/* ---- tensor cores -------------------------------------------------------------- */

static bool has_wmma(const lw_stmt *s) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (has_wmma(s->stmts[i])) return true;
      return false;
    case LW_FOR: return has_wmma(s->body);
    case LW_IF: return has_wmma(s->then_s) || has_wmma(s->else_s);
    case LW_WMMA: return true;
    default: return false;
  }
}

/* Whether a tensor-core operation of s has b among its operands. */
static bool wmma_operand(const lw_stmt *s, const dg_buffer *b) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (wmma_operand(s->stmts[i], b)) return true;
      return false;
    case LW_FOR: return wmma_operand(s->body, b);
    case LW_IF: return wmma_operand(s->then_s, b) || wmma_operand(s->else_s, b);
    case LW_WMMA:
      for (int i = 0; i < s->wmma_n; i++)
        if (s->wmma_buf[i] == b) return true;
      return false;
    default: return false;
  }
}

/* The layout of a matrix_a/b fragment: that of the loads writing it. */
static const char *fragment_layout(const lw_stmt *s, const dg_buffer *b) {
  if (!s) return NULL;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) {
        const char *l = fragment_layout(s->stmts[i], b);
        if (l) return l;
      }
      return NULL;
    case LW_FOR: return fragment_layout(s->body, b);
    case LW_IF: {
      const char *l = fragment_layout(s->then_s, b);
      return l ? l : fragment_layout(s->else_s, b);
    }
    case LW_WMMA:
      if ((s->intrin->kind == DG_INTRIN_LOAD_A || s->intrin->kind == DG_INTRIN_LOAD_B) &&
          s->wmma_buf[1] == b)
        return s->intrin->layout;
      return NULL;
    default: return NULL;
  }
}

/* `ns::fragment<use, 16, 16, 16, T[, layout]> NAME[n];` */
static void fragment_decl(dev *d, const dg_buffer *b) {
  cg_emitter *e = &d->e;
  const char *ns = e->L->wmma_ns;
  const char *use = b->scope == DG_SCOPE_WMMA_A   ? "matrix_a"
                    : b->scope == DG_SCOPE_WMMA_B ? "matrix_b"
                                                  : "accumulator";
  codegen_em_indent(e);
  dg_str_printf(&e->out, "%s::fragment<%s::%s, 16, 16, 16, %s", ns, ns, use,
                codegen_em_storage_type(e, b->dtype));
  if (b->scope != DG_SCOPE_WMMA_ACC) {
    const char *layout = fragment_layout(d->k->body, b);
    dg_str_printf(&e->out, ", %s::%s", ns, layout ? layout : "row_major");
  }
  dg_str_puts(&e->out, "> ");
  codegen_em_buf(e, b);
  dg_str_printf(&e->out, "[%" PRId64 "];\n", ir_buffer_numel(b) / 256);
}

static void put_fragment(dev *d, const lw_stmt *s, int i) {
  codegen_em_buf(&d->e, s->wmma_buf[i]);
  dg_str_putc(&d->e.out, '[');
  if (s->wmma_frag[i]) codegen_em_expr(&d->e, s->wmma_frag[i]);
  else codegen_em_fail(&d->e, "block %s: fragment %s has no tile index", s->wmma_block,
                       s->wmma_buf[i]->name);
  dg_str_putc(&d->e.out, ']');
}

static void put_tile_ptr(dev *d, const lw_stmt *s, int i) {
  dg_str_puts(&d->e.out, "&");
  codegen_em_access(&d->e, s->wmma_buf[i], s->wmma_origin[i], s->wmma_buf[i]->ndim);
}

static void wmma_stmt(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  const dg_lang *L = e->L;
  dg_str *o = &e->out;
  if (d->emulate || !L->wmma_ns) {
    if (!d->emulate) {
      codegen_em_fail(e, "block %s: the target has no tensor cores", s->wmma_block);
      return;
    }
    /* the warp's operation as its block's own loops, run once per warp */
    line(d, "if (dg_tx == 0) {  /* %s (block %s), for the warp */", s->intrin->name, s->wmma_block);
    e->indent++;
    emit_stmt(d, s->body);
    e->indent--;
    line(d, "}");
    return;
  }
  const char *ns = L->wmma_ns;
  codegen_em_indent(e);
  switch (s->intrin->kind) {
    case DG_INTRIN_FILL: {
      dg_dtype t = s->wmma_buf[0]->dtype;
      dg_str_printf(o, "%s::fill_fragment(", ns);
      put_fragment(d, s, 0);
      if (t == DG_F16) dg_str_printf(o, ", %s(0.0f));\n", L->float_to_half);
      else dg_str_printf(o, ", %s);\n", dg_dtype_is_float(t) ? "0.0f" : "0");
      return;
    }
    case DG_INTRIN_LOAD_A:
    case DG_INTRIN_LOAD_B:
      dg_str_printf(o, "%s::load_matrix_sync(", ns);
      put_fragment(d, s, 1);
      dg_str_puts(o, ", ");
      put_tile_ptr(d, s, 0);
      dg_str_printf(o, ", %" PRId64 ");\n", s->wmma_buf[0]->shape[s->wmma_buf[0]->ndim - 1]);
      return;
    case DG_INTRIN_MMA:
      dg_str_printf(o, "%s::mma_sync(", ns);
      put_fragment(d, s, 2);
      dg_str_puts(o, ", ");
      put_fragment(d, s, 0);
      dg_str_puts(o, ", ");
      put_fragment(d, s, 1);
      dg_str_puts(o, ", ");
      put_fragment(d, s, 2);
      dg_str_puts(o, ");\n");
      return;
    case DG_INTRIN_STORE:
      dg_str_printf(o, "%s::store_matrix_sync(", ns);
      put_tile_ptr(d, s, 1);
      dg_str_puts(o, ", ");
      put_fragment(d, s, 0);
      dg_str_printf(o, ", %" PRId64 ", %s::mem_row_major);\n",
                    s->wmma_buf[1]->shape[s->wmma_buf[1]->ndim - 1], ns);
      return;
    case DG_INTRIN_KIND_COUNT: break;
  }
  DG_UNREACHABLE();
}

static void emit_stmt(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  if (!s || e->failed) return;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++) emit_stmt(d, s->stmts[i]);
      return;
    case LW_FOR:
      if (s->extent <= 0 || s->extent > INT32_MAX) {
        codegen_em_fail(e, "loop %s has extent %" PRId64, s->var->name, s->extent);
        return;
      }
      if (s->loop_kind == LW_LOOP_UNROLLED && e->L->unroll_pragma) line(d, "%s", e->L->unroll_pragma);
      put_loop_head(d, s->var, s->extent);
      e->indent++;
      {
        bool pushed = e->ranges && e->ranges->n < (int)DG_ARRAY_LEN(e->ranges->var);
        if (pushed) ir_ranges_push(e->ranges, s->var, 0, s->extent - 1);
        emit_stmt(d, s->body);
        if (pushed) ir_ranges_pop(e->ranges, 1);
      }
      e->indent--;
      line(d, "}");
      return;
    case LW_IF:
      codegen_em_indent(e);
      dg_str_puts(&e->out, "if (");
      codegen_em_expr(e, s->cond);
      dg_str_puts(&e->out, ") {\n");
      e->indent++;
      emit_stmt(d, s->then_s);
      e->indent--;
      if (s->else_s) {
        line(d, "} else {");
        e->indent++;
        emit_stmt(d, s->else_s);
        e->indent--;
      }
      line(d, "}");
      return;
    case LW_STORE:
      if (s->cp_async && !d->emulate && e->L->cp_async_fn) async_store(d, s);
      else if (s->lanes > 1) vector_store(d, s);
      else scalar_store(d, s);
      return;
    case LW_BARRIER:
      if (d->emulate || !e->L->barrier) codegen_em_fail(e, "a barrier inside the threads' code");
      else line(d, "%s", e->L->barrier);
      return;
    case LW_ASYNC_COMMIT:
      if (!d->emulate && e->L->cp_async_commit) line(d, "%s", e->L->cp_async_commit);
      else line(d, "/* cp.async.commit_group: the copies above are plain stores here */");
      return;
    case LW_ASYNC_WAIT:
      if (!d->emulate && e->L->cp_async_wait_fmt) {
        codegen_em_indent(e);
        dg_str_printf(&e->out, e->L->cp_async_wait_fmt, (long long)s->wait_count);
        dg_str_putc(&e->out, '\n');
      } else {
        line(d, "/* cp.async.wait_group %lld: complete already */", (long long)s->wait_count);
      }
      return;
    case LW_ALLREDUCE:
      if (d->emulate || !e->L->shfl_down_fmt) codegen_em_fail(e, "an allreduce inside the threads' code");
      else cuda_allreduce(d, s);
      return;
    case LW_WMMA: wmma_stmt(d, s); return;
  }
}

/* ---- C emulation: phases ------------------------------------------------------ */

static void thread_loops(dev *d, const lw_stmt *const *ss, int n) {
  cg_emitter *e = &d->e;
  const lw_kernel *k = d->k;
  line(d, "for (int32_t dg_tz = 0; dg_tz < %" PRId64 "; dg_tz++)", k->block[2]);
  line(d, "for (int32_t dg_ty = 0; dg_ty < %" PRId64 "; dg_ty++)", k->block[1]);
  line(d, "for (int32_t dg_tx = 0; dg_tx < %" PRId64 "; dg_tx++) {", k->block[0]);
  e->indent++;
  line(d, "const int32_t dg_tid = (dg_tz * %" PRId64 " + dg_ty) * %" PRId64 " + dg_tx;",
       k->block[1], k->block[0]);
  line(d, "(void)dg_tid;");
  for (int i = 0; i < k->n_local; i++)
    if (is_fragment(k->local[i])) {
      line(d, "const int32_t dg_wid = dg_tid / 32; /* the warp */");
      line(d, "(void)dg_wid;");
      break;
    }
  for (int i = 0; i < n; i++) emit_stmt(d, ss[i]);
  e->indent--;
  line(d, "}");
}

static void phased(dev *d, const lw_stmt *s) {
  cg_emitter *e = &d->e;
  if (!s || e->failed) return;
  if (!lower_stmt_has_barrier(s)) {
    thread_loops(d, &s, 1);
    return;
  }
  switch (s->kind) {
    case LW_SEQ: {
      int i = 0;
      while (i < s->n) {
        if (!lower_stmt_has_barrier(s->stmts[i])) {
          int j = i;
          while (j < s->n && !lower_stmt_has_barrier(s->stmts[j])) j++;
          thread_loops(d, (const lw_stmt *const *)&s->stmts[i], j - i);
          i = j;
        } else {
          phased(d, s->stmts[i]);
          i++;
        }
      }
      return;
    }
    case LW_FOR:
      put_loop_head(d, s->var, s->extent);
      e->indent++;
      phased(d, s->body);
      e->indent--;
      line(d, "}");
      return;
    case LW_IF:
      if (uses_thread(d, s->cond)) {
        codegen_em_fail(e, "a barrier under a condition on the thread index (all threads "
                           "must reach it)");
        return;
      }
      codegen_em_indent(e);
      dg_str_puts(&e->out, "if (");
      codegen_em_expr(e, s->cond);
      dg_str_puts(&e->out, ") {\n");
      e->indent++;
      phased(d, s->then_s);
      e->indent--;
      if (s->else_s) {
        line(d, "} else {");
        e->indent++;
        phased(d, s->else_s);
        e->indent--;
      }
      line(d, "}");
      return;
    case LW_BARRIER: return; /* the phase boundary itself */
    case LW_ALLREDUCE: emulated_allreduce(d, s); return;
    case LW_STORE:
    case LW_WMMA:
    case LW_ASYNC_COMMIT:
    case LW_ASYNC_WAIT: return; /* no barrier inside: handled above */
  }
}

/* ---- kernels and the program ----------------------------------------------------- */

static bool param_written(const lw_kernel *k, const dg_buffer *b);

static bool stmt_writes(const lw_stmt *s, const dg_buffer *b) {
  if (!s) return false;
  switch (s->kind) {
    case LW_SEQ:
      for (int i = 0; i < s->n; i++)
        if (stmt_writes(s->stmts[i], b)) return true;
      return false;
    case LW_FOR: return stmt_writes(s->body, b);
    case LW_IF: return stmt_writes(s->then_s, b) || stmt_writes(s->else_s, b);
    case LW_STORE: return s->buf == b;
    case LW_WMMA: return stmt_writes(s->body, b);
    default: return false;
  }
}

static bool param_written(const lw_kernel *k, const dg_buffer *b) { return stmt_writes(k->body, b); }

static const char *kernel_fn_name(const dev *d, const lw_kernel *k, char *buf, size_t n) {
  if (d->emulate) snprintf(buf, n, "dg_launch_%d", (int)(k - d->p->kernels));
  else snprintf(buf, n, "%s", k->name);
  return buf;
}

/* The ranges of the block and thread indices, which the loops inside add
 * to: a floor division or modulus of an index expression they prove
 * non-negative is printed as plain / or % (emit.c). */
static void index_ranges(dev *d, const lw_kernel *k) {
  static const dg_thread_tag tags[6] = {DG_TAG_BLOCK_X,  DG_TAG_BLOCK_Y,  DG_TAG_BLOCK_Z,
                                        DG_TAG_THREAD_X, DG_TAG_THREAD_Y, DG_TAG_THREAD_Z};
  const int64_t extents[6] = {k->grid[0],  k->grid[1],  k->grid[2],
                              k->block[0], k->block[1], k->block[2]};
  d->ranges.n = 0;
  d->e.ranges = &d->ranges;
  for (int i = 0; i < 6; i++)
    if (k->tag_var[tags[i]] && extents[i] >= 1)
      ir_ranges_push(&d->ranges, k->tag_var[tags[i]], 0, extents[i] - 1);
}

static void emit_kernel(dev *d, const lw_kernel *k) {
  cg_emitter *e = &d->e;
  const dg_lang *L = e->L;
  d->k = k;
  d->nthreads = k->block[0] * k->block[1] * k->block[2];
  e->live.len = 0;
  char where[160];
  snprintf(where, sizeof where, "kernel %s", k->name);
  e->where = where;
  char fname[96];
  kernel_fn_name(d, k, fname, sizeof fname);
  dg_str_printf(&e->out,
                "/* %s: grid (%" PRId64 ", %" PRId64 ", %" PRId64 "), block (%" PRId64 ", %" PRId64
                ", %" PRId64 ") */\n",
                k->name, k->grid[0], k->grid[1], k->grid[2], k->block[0], k->block[1], k->block[2]);
  if (d->emulate) {
    dg_str_printf(&e->out, "static void %s(void **args) {\n", fname);
  } else {
    dg_str_printf(&e->out, "%svoid ", L->kernel_prefix);
    if (L->launch_bounds_fmt) dg_str_printf(&e->out, L->launch_bounds_fmt, (long long)d->nthreads);
    dg_str_printf(&e->out, "%s(", fname);
    for (int i = 0; i < k->n_params; i++) {
      const dg_buffer *b = k->params[i];
      dg_str_printf(&e->out, "%s%s%s *%s ", i ? ", " : "", param_written(k, b) ? "" : "const ",
                    codegen_em_storage_type(e, b->dtype), L->restrict_kw);
      codegen_em_buf(e, b);
    }
    dg_str_puts(&e->out, ") {\n");
  }
  e->indent = 1;
  for (int i = 0; i < k->n_params; i++) DG_VEC_PUSH(&e->live, k->params[i]);
  for (int i = 0; i < k->n_shared; i++) DG_VEC_PUSH(&e->live, k->shared[i]);
  for (int i = 0; i < k->n_local; i++) DG_VEC_PUSH(&e->live, k->local[i]);
  if (d->emulate) {
    for (int i = 0; i < k->n_params; i++) {
      const dg_buffer *b = k->params[i];
      const char *t = codegen_em_storage_type(e, b->dtype);
      codegen_em_indent(e);
      dg_str_printf(&e->out, "%s *%s ", t, L->restrict_kw);
      codegen_em_buf(e, b);
      dg_str_printf(&e->out, " = (%s *)args[%d];\n", t, i);
    }
    /* shared: one array per block; local: one slot per thread */
    int n_arr = k->n_shared + k->n_local;
    for (int i = 0; i < n_arr; i++) {
      const dg_buffer *b = i < k->n_shared ? k->shared[i] : k->local[i - k->n_shared];
      int64_t n = ir_buffer_numel(b) * (i < k->n_shared ? 1 : d->nthreads);
      if (is_fragment(b)) n = ir_buffer_numel(b) * ((d->nthreads + 31) / 32);
      const char *t = codegen_em_storage_type(e, b->dtype);
      codegen_em_indent(e);
      dg_str_printf(&e->out, "%s *", t);
      codegen_em_buf(e, b);
      dg_str_printf(&e->out, " = (%s *)%s((size_t)%" PRId64 " * sizeof(%s));\n", t, L->malloc_fn,
                    n, t);
    }
    codegen_em_indent(e);
    dg_str_puts(&e->out, "if (1");
    for (int i = 0; i < n_arr; i++) {
      dg_str_puts(&e->out, " && ");
      codegen_em_buf(e, i < k->n_shared ? k->shared[i] : k->local[i - k->n_shared]);
    }
    dg_str_puts(&e->out, ") {\n");
    e->indent++;
    line(d, "for (int32_t dg_bz = 0; dg_bz < %" PRId64 "; dg_bz++)", k->grid[2]);
    line(d, "for (int32_t dg_by = 0; dg_by < %" PRId64 "; dg_by++)", k->grid[1]);
    line(d, "for (int32_t dg_bx = 0; dg_bx < %" PRId64 "; dg_bx++) {", k->grid[0]);
    e->indent++;
    index_ranges(d, k); /* as on the GPU, so the emulation checks those choices too */
    phased(d, k->body);
    e->ranges = NULL;
    e->indent--;
    line(d, "}");
    e->indent--;
    line(d, "}");
    for (int i = 0; i < n_arr; i++) {
      codegen_em_indent(e);
      dg_str_printf(&e->out, "%s(", L->free_fn);
      codegen_em_buf(e, i < k->n_shared ? k->shared[i] : k->local[i - k->n_shared]);
      dg_str_puts(&e->out, ");\n");
    }
  } else {
    static const dg_thread_tag tags[6] = {DG_TAG_BLOCK_X,  DG_TAG_BLOCK_Y,  DG_TAG_BLOCK_Z,
                                          DG_TAG_THREAD_X, DG_TAG_THREAD_Y, DG_TAG_THREAD_Z};
    index_ranges(d, k);
    for (int i = 0; i < 6; i++)
      line(d, "const int32_t %s = (int32_t)%s; (void)%s;", tag_names[tags[i]],
           L->thread_index[tags[i]], tag_names[tags[i]]);
    line(d, "const int32_t dg_tid = (dg_tz * %" PRId64 " + dg_ty) * %" PRId64 " + dg_tx; (void)dg_tid;",
         k->block[1], k->block[0]);
    int64_t dyn_off = 0;
    bool dyn_decl = false;
    for (int i = 0; i < k->n_shared; i++) {
      const dg_buffer *b = k->shared[i];
      const char *t = codegen_em_storage_type(e, b->dtype);
      int64_t n = ir_buffer_numel(b);
      codegen_em_indent(e);
      if (b->scope == DG_SCOPE_SHARED_DYN && L->dyn_shared_decl) {
        if (!dyn_decl) {
          dg_str_printf(&e->out, "%s\n", L->dyn_shared_decl);
          codegen_em_indent(e);
          dyn_decl = true;
        }
        dg_str_printf(&e->out, "%s *", t);
        codegen_em_buf(e, b);
        dg_str_printf(&e->out, " = (%s *)(dg_dyn_smem + %" PRId64 ");\n", t, dyn_off);
        /* 128-byte parts, as lower_kernel_shared_bytes counts them */
        dyn_off += (n * dg_dtype_bytes(b->dtype) + 127) / 128 * 128;
      } else {
        const char *al = L->wmma_align && wmma_operand(k->body, b) ? L->wmma_align : L->align16;
        dg_str_printf(&e->out, "%s%s%s ", L->scope_prefix[DG_SCOPE_SHARED] ? L->scope_prefix[DG_SCOPE_SHARED] : "",
                      al ? al : "", t);
        codegen_em_buf(e, b);
        dg_str_printf(&e->out, "[%" PRId64 "];\n", n);
      }
    }
    for (int i = 0; i < k->n_local; i++) {
      const dg_buffer *b = k->local[i];
      if (is_fragment(b)) {
        fragment_decl(d, b);
        continue;
      }
      codegen_em_indent(e);
      dg_str_printf(&e->out, "%s%s ", L->align16 ? L->align16 : "",
                    codegen_em_storage_type(e, b->dtype));
      codegen_em_buf(e, b);
      dg_str_printf(&e->out, "[%" PRId64 "];\n", ir_buffer_numel(b));
    }
    emit_stmt(d, k->body);
    e->ranges = NULL;
  }
  e->indent = 0;
  dg_str_puts(&e->out, "}\n\n");
}

static void emit_host(dev *d) {
  cg_emitter *e = &d->e;
  const lw_program *p = d->p;
  const dg_lang *L = e->L;
  dg_str_printf(&e->out, "void %s(void **args) {\n", CODEGEN_PROGRAM_FN);
  e->indent = 1;
  line(d, "void *dg_a[%d] = {0};", p->n_allocs > 0 ? p->n_allocs : 1);
  for (int i = 0; i < p->n_allocs; i++) {
    const dg_buffer *b = p->allocs[i];
    line(d, "dg_a[%d] = %s((size_t)%" PRId64 " * sizeof(%s));", i, L->malloc_fn,
         ir_buffer_numel(b), codegen_em_storage_type(e, b->dtype));
  }
  codegen_em_indent(e);
  dg_str_puts(&e->out, "if (1");
  for (int i = 0; i < p->n_allocs; i++) dg_str_printf(&e->out, " && dg_a[%d]", i);
  dg_str_puts(&e->out, ") {\n");
  e->indent++;
  for (int j = 0; j < p->n_kernels; j++) {
    const lw_kernel *k = &p->kernels[j];
    char fname[96];
    codegen_em_indent(e);
    dg_str_printf(&e->out, "{ void *dg_k[%d] = {", k->n_params > 0 ? k->n_params : 1);
    for (int i = 0; i < k->n_params; i++) {
      int pi = -1, ai = -1;
      for (int q = 0; q < p->n_params; q++)
        if (p->params[q] == k->params[i]) pi = q;
      for (int q = 0; q < p->n_allocs; q++)
        if (p->allocs[q] == k->params[i]) ai = q;
      DG_ASSERT(pi >= 0 || ai >= 0);
      if (pi >= 0) dg_str_printf(&e->out, "%sargs[%d]", i ? ", " : "", pi);
      else dg_str_printf(&e->out, "%sdg_a[%d]", i ? ", " : "", ai);
    }
    if (!k->n_params) dg_str_puts(&e->out, "0");
    dg_str_printf(&e->out, "}; %s(dg_k); }\n", kernel_fn_name(d, k, fname, sizeof fname));
  }
  e->indent--;
  line(d, "}");
  for (int i = 0; i < p->n_allocs; i++) line(d, "%s(dg_a[%d]);", L->free_fn, i);
  e->indent = 0;
  dg_str_puts(&e->out, "}\n");
}

/* Whether emitted code names any of the table's f16 types or conversions
 * (every f16 value, load, store and rounding prints one of them). */
static bool mentions_f16(const dg_lang *L, const char *code) {
  const char *names[] = {L->half_type, L->half2_type, L->half_to_float, L->float_to_half,
                         L->round_half};
  for (size_t i = 0; i < DG_ARRAY_LEN(names); i++)
    if (names[i] && names[i][0] && strstr(code, names[i])) return true;
  return false;
}

char *codegen_emit_program(const struct lw_program_s *p, const dg_lang *lang, dg_status *st) {
  dev d = {.p = p, .emulate = lang->emulate_threads, .lane = -1};
  cg_emitter *e = &d.e;
  e->L = lang;
  e->st = st;
  e->user = &d;
  e->var_hook = var_hook;
  e->load_hook = load_hook;
  e->offset_hook = offset_hook;
  e->where = "program";
  if (!d.emulate && (!lang->barrier || !lang->shfl_down_fmt || !lang->thread_index[DG_TAG_THREAD_X]))
    return dg_fail(st, DG_ERR_INVALID, "codegen %s: the table can neither index threads nor "
                                       "emulate them", lang->name), NULL;
  for (int i = 0; i < p->n_params; i++) DG_VEC_PUSH(&e->buf_names, p->params[i]->name);
  for (int i = 0; i < p->n_allocs; i++) DG_VEC_PUSH(&e->buf_names, p->allocs[i]->name);
  for (int j = 0; j < p->n_kernels; j++) {
    const lw_kernel *k = &p->kernels[j];
    for (int i = 0; i < k->n_shared; i++) DG_VEC_PUSH(&e->buf_names, k->shared[i]->name);
    for (int i = 0; i < k->n_local; i++) DG_VEC_PUSH(&e->buf_names, k->local[i]->name);
  }
  bool wmma = false;
  for (int j = 0; j < p->n_kernels; j++) wmma |= has_wmma(p->kernels[j].body);
  if (wmma && !d.emulate && !lang->wmma_ns)
    return dg_fail(st, DG_ERR_INVALID, "codegen %s: program %s has tensorized blocks and the "
                                       "target has no tensor cores", lang->name, p->name), NULL;
  dg_str_init(&e->out);
  dg_str_puts(&e->out, lang->preamble);
  if (wmma && !d.emulate && lang->wmma_include) dg_str_printf(&e->out, "%s\n", lang->wmma_include);
  dg_str_putc(&e->out, '\n');
  size_t body_at = e->out.len;
  for (int j = 0; j < p->n_kernels && !e->failed; j++) emit_kernel(&d, &p->kernels[j]);
  if (d.emulate && !e->failed) emit_host(&d);
  DG_VEC_FREE(&e->live);
  DG_VEC_FREE(&e->buf_names);
  if (e->failed) {
    dg_str_free(&e->out);
    return NULL;
  }
  if (!d.emulate && !wmma && !mentions_f16(lang, e->out.s + body_at)) {
    /* the f16 header is a fixed cost of every compilation (lang_cuda.c) */
    dg_str out;
    dg_str_init(&out);
    dg_str_puts(&out, "#define DG_NO_F16\n");
    dg_str_putn(&out, e->out.s, e->out.len);
    dg_str_free(&e->out);
    return dg_str_take(&out);
  }
  return dg_str_take(&e->out);
}

char *codegen_emit_program_source(const struct lw_program_s *p, const dg_func *reference,
                                  dg_status *st) {
  const dg_lang *lang = &codegen_lang_c;
  if (reference) {
    bool same = reference->n_params == p->n_params;
    for (int i = 0; same && i < p->n_params; i++)
      same = reference->params[i]->dtype == p->params[i]->dtype &&
             ir_buffer_numel(reference->params[i]) == ir_buffer_numel(p->params[i]);
    if (!same)
      return dg_fail(st, DG_ERR_INVALID,
                     "codegen c: program %s and its reference %s have different parameters",
                     p->name, reference->name), NULL;
  }
  char *prog = codegen_emit_program(p, lang, st);
  if (!prog) return NULL;
  if (!reference) return prog;
  codegen_opts ro = {.reference = true, .fn_name = CODEGEN_REFERENCE_FN};
  char *r = codegen_emit(reference, lang, &ro, st);
  if (!r) {
    free(prog);
    return NULL;
  }
  dg_str out;
  dg_str_init(&out);
  dg_str_puts(&out, prog);
  dg_str_putc(&out, '\n');
  dg_str_puts(&out, r);
  free(prog);
  free(r);
  return dg_str_take(&out);
}
