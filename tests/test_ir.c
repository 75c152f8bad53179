/* test_ir.c: clone, structural equality and hash, substitution, verifier.
 *
 * Kernels are built with the constructors of ir.c: a matmul
 * (for i, j, k: block C(vi: S, vj: S, vk: R) with an init) and a two-stage
 * kernel whose root allocates an intermediate buffer. Broken kernels for
 * the verifier are valid ones with one thing changed by hand.
 */
#include "dragon/ir.h"
#include "test.h"

/* for i in n: for j in n: for k in n:
 *   block C(vi: S(n)=i, vj: S(n)=j, vk: R(n)=k)
 *     reads A[vi, vk], B[vk, vj]  writes C[vi, vj]
 *     init C[vi, vj] = 0.0;  C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj] */
static dg_func *matmul(int64_t n) {
  dg_func *f = ir_func_new("matmul");
  int64_t sh[2] = {n, n};
  dg_buffer *A = ir_buffer_new(f, "A", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  dg_buffer *B = ir_buffer_new(f, "B", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  dg_buffer *C = ir_buffer_new(f, "C", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  ir_func_add_param(f, A);
  ir_func_add_param(f, B);
  ir_func_add_param(f, C);
  dg_var *i = ir_var_new(f, "i", DG_I32), *j = ir_var_new(f, "j", DG_I32);
  dg_var *k = ir_var_new(f, "k", DG_I32);
  dg_var *vi = ir_var_new(f, "vi", DG_I32), *vj = ir_var_new(f, "vj", DG_I32);
  dg_var *vk = ir_var_new(f, "vk", DG_I32);
  dg_block *b = ir_block_new(f, "C");
  ir_block_add_iter(f, b, vi, n, DG_ITER_SPATIAL, ir_var(f, i));
  ir_block_add_iter(f, b, vj, n, DG_ITER_SPATIAL, ir_var(f, j));
  ir_block_add_iter(f, b, vk, n, DG_ITER_REDUCE, ir_var(f, k));
  dg_expr *ik[2] = {ir_var(f, vi), ir_var(f, vk)};
  dg_expr *kj[2] = {ir_var(f, vk), ir_var(f, vj)};
  dg_expr *ij[2] = {ir_var(f, vi), ir_var(f, vj)};
  ir_block_add_read(f, b, A, ik, NULL);
  ir_block_add_read(f, b, B, kj, NULL);
  ir_block_add_write(f, b, C, ij, NULL);
  ir_anns_set_str(f, &b->anns, "meta_schedule.tiling_structure", "SSRSRS");
  b->init = ir_store(f, C, ij, 2, ir_float(f, 0.0, DG_F32));
  dg_expr *prod = ir_mul(f, ir_load(f, A, ik, 2), ir_load(f, B, kj, 2));
  b->body = ir_store(f, C, ij, 2, ir_add(f, ir_load(f, C, ij, 2), prod));
  dg_stmt *s = ir_block_stmt(f, b);
  s = ir_for(f, k, n, DG_LOOP_SERIAL, DG_TAG_NONE, s);
  ir_anns_set_int(f, &s->anns, "pragma_auto_unroll_max_step", 16);
  s = ir_for(f, j, n, DG_LOOP_SERIAL, DG_TAG_NONE, s);
  s = ir_for(f, i, n, DG_LOOP_SERIAL, DG_TAG_NONE, s);
  dg_block *root = ir_block_new(f, "root");
  root->body = s;
  f->body = ir_block_stmt(f, root);
  return f;
}

/* root allocates T (local); block T: T[vi] = A[vi] * 2; block D: D[vi] = T[vi] + 1 */
static dg_func *two_stage(void) {
  dg_func *f = ir_func_new("two_stage");
  int64_t sh[1] = {8};
  dg_buffer *A = ir_buffer_new(f, "A", DG_F32, 1, sh, DG_SCOPE_GLOBAL);
  dg_buffer *D = ir_buffer_new(f, "D", DG_F32, 1, sh, DG_SCOPE_GLOBAL);
  dg_buffer *T = ir_buffer_new(f, "T", DG_F32, 1, sh, DG_SCOPE_LOCAL);
  ir_func_add_param(f, A);
  ir_func_add_param(f, D);
  dg_block *root = ir_block_new(f, "root");
  ir_block_add_alloc(f, root, T);
  dg_stmt *nests[2];
  const char *names[2] = {"T", "D"};
  for (int q = 0; q < 2; q++) {
    dg_var *i = ir_var_new(f, q ? "i1" : "i0", DG_I32);
    dg_var *vi = ir_var_new(f, q ? "v1" : "v0", DG_I32);
    dg_block *b = ir_block_new(f, names[q]);
    ir_block_add_iter(f, b, vi, 8, DG_ITER_SPATIAL, ir_var(f, i));
    dg_expr *x[1] = {ir_var(f, vi)};
    dg_buffer *src = q ? T : A, *dst = q ? D : T;
    ir_block_add_read(f, b, src, x, NULL);
    ir_block_add_write(f, b, dst, x, NULL);
    dg_expr *v = q ? ir_add(f, ir_load(f, src, x, 1), ir_float(f, 1.0, DG_F32))
                   : ir_mul(f, ir_load(f, src, x, 1), ir_float(f, 2.0, DG_F32));
    b->body = ir_store(f, dst, x, 1, v);
    nests[q] = ir_for(f, i, 8, q ? DG_LOOP_VECTORIZED : DG_LOOP_PARALLEL, DG_TAG_NONE,
                      ir_block_stmt(f, b));
  }
  root->body = ir_seq(f, nests, 2);
  f->body = ir_block_stmt(f, root);
  return f;
}

/* The loops of matmul and its block. */
static dg_stmt *loop_at(dg_func *f, int depth) {
  dg_stmt *s = ir_func_root(f)->body;
  for (int d = 0; d < depth; d++) s = s->body;
  return s;
}

/* ---- clone, equality, hash ----------------------------------------------- */

DG_TEST(ir_clone_equal_hash) {
  dg_func *f = matmul(16);
  dg_status st;
  CHECK(ir_verify(f, &st));
  CHECK_OK(st);
  uint64_t h = ir_func_hash(f);
  dg_func *g = ir_func_clone(f);
  CHECK(g != f && g->arena != f->arena);
  CHECK(ir_func_equal(f, g));
  CHECK(ir_func_hash(g) == h);
  char why[256] = "untouched";
  CHECK(ir_func_equal_explain(f, g, why, sizeof why));
  CHECK_STREQ(why, "");
  /* ids, names, annotations are preserved */
  CHECK(g->next_var_id == f->next_var_id && g->next_buf_id == f->next_buf_id);
  dg_stmt *lf = loop_at(f, 2), *lg = loop_at(g, 2);
  CHECK(lf->loop_var != lg->loop_var);
  CHECK(lf->loop_var->id == lg->loop_var->id);
  CHECK_STREQ(lg->loop_var->name, "k");
  const dg_ann *an = ir_anns_get(&lg->anns, "pragma_auto_unroll_max_step");
  CHECK(an && an->kind == DG_ANN_INT && an->i == 16);
  dg_block *bc = ir_find_block(g, "C");
  CHECK(bc && bc != ir_find_block(f, "C"));
  CHECK(bc->iters[2].var->id == ir_find_block(f, "C")->iters[2].var->id);
  CHECK(bc->reads[0].buf == g->params[0]); /* uses point at the copies */
  CHECK(bc->iters[0].binding->var == loop_at(g, 0)->loop_var);
  /* changing the clone leaves the original alone */
  lg->extent = 8;
  CHECK(lf->extent == 16);
  CHECK(!ir_func_equal(f, g));
  lg->extent = 16;
  /* the clone lives on after the original is freed (ASan checks that no
   * node is shared) */
  ir_func_free(f);
  CHECK(ir_verify(g, &st));
  CHECK(ir_func_hash(g) == h);
  dg_func *g2 = ir_func_clone(g);
  CHECK(ir_func_equal(g, g2));
  ir_func_free(g2);
  ir_func_free(g);

  dg_func *t = two_stage(), *tc = ir_func_clone(t);
  CHECK(ir_func_equal(t, tc) && ir_func_hash(t) == ir_func_hash(tc));
  CHECK(ir_func_root(tc)->allocs[0] == ir_find_buffer(tc, "T"));
  CHECK(ir_func_root(tc)->allocs[0] != ir_find_buffer(t, "T"));
  ir_func_free(t);
  CHECK(ir_verify(tc, &st));
  ir_func_free(tc);
}

DG_TEST(ir_equal_built_separately) {
  /* independent builds: different pointers and ids, same structure */
  dg_func *f = matmul(16);
  dg_func *g = ir_func_new("matmul");
  ir_var_new(g, "unused", DG_I32); /* shifts every id of the second build */
  ir_func_free(g);
  g = matmul(16);
  CHECK(ir_func_equal(f, g));
  CHECK(ir_func_hash(f) == ir_func_hash(g));
  dg_func *h = matmul(32);
  CHECK(!ir_func_equal(f, h));
  CHECK(ir_func_hash(f) != ir_func_hash(h));
  dg_func *again = matmul(16);
  CHECK(ir_func_hash(again) == ir_func_hash(f)); /* deterministic */
  ir_func_free(again);
  ir_func_free(f);
  ir_func_free(g);
  ir_func_free(h);
  dg_func *t1 = two_stage(), *t2 = two_stage();
  CHECK(ir_func_equal(t1, t2) && ir_func_hash(t1) == ir_func_hash(t2));
  ir_func_free(t1);
  ir_func_free(t2);
}

/* One change to a clone of matmul(16): it must differ, hash differently,
 * and the explanation must contain `want`. */
typedef void (*mutation)(dg_func *g);

static void m_const(dg_func *g) {
  dg_block *b = ir_find_block(g, "C");
  b->init->value = ir_float(g, 1.0, DG_F32);
}
static void m_shape(dg_func *g) { g->params[1]->shape[0] = 17; }
static void m_loop_kind(dg_func *g) { loop_at(g, 1)->loop_kind = DG_LOOP_PARALLEL; }
static void m_thread(dg_func *g) {
  dg_stmt *s = loop_at(g, 0);
  s->loop_kind = DG_LOOP_THREAD;
  s->tag = DG_TAG_BLOCK_X;
}
static void m_ann_value(dg_func *g) {
  ir_anns_set_int(g, &loop_at(g, 2)->anns, "pragma_auto_unroll_max_step", 64);
}
static void m_ann_block(dg_func *g) {
  ir_anns_set_str(g, &ir_find_block(g, "C")->anns, "meta_schedule.tiling_structure", "SSSRRSRS");
}
static void m_block_name(dg_func *g) { ir_find_block(g, "C")->name = "C_update"; }
static void m_var_name(dg_func *g) { loop_at(g, 1)->loop_var->name = "jj"; }
static void m_iter_kind(dg_func *g) { ir_find_block(g, "C")->iters[2].kind = DG_ITER_SPATIAL; }
static void m_dtype(dg_func *g) { g->params[0]->dtype = DG_F16; }
static void m_binding(dg_func *g) {
  dg_block *b = ir_find_block(g, "C");
  b->iters[0].binding = ir_var(g, loop_at(g, 1)->loop_var);
}
static void m_region(dg_func *g) {
  dg_block *b = ir_find_block(g, "C");
  b->reads[1].ext[0] = ir_int(g, 2);
}
static void m_name(dg_func *g) { g->name = "matmul2"; }
static void m_scope(dg_func *g) { g->params[2]->scope = DG_SCOPE_SHARED; }

DG_TEST(ir_equal_detects_each_change) {
  static const struct {
    mutation fn;
    const char *want;
  } cases[] = {
      {m_const, "block \"C\": constant 0 vs 1"},
      {m_shape, "buffer B shape[0] 16 vs 17"},
      {m_loop_kind, "loop j: loop kind serial vs parallel"},
      {m_thread, "loop i: loop kind serial vs bind blockIdx.x"},
      {m_ann_value, "loop annotation pragma_auto_unroll_max_step differs"},
      {m_ann_block, "block \"C\": block annotation meta_schedule.tiling_structure differs"},
      {m_block_name, "block name C vs C_update"},
      {m_var_name, "variable j vs jj"},
      {m_iter_kind, "iteration variable vk: R(16) vs S(16)"},
      {m_dtype, "buffer A dtype f32 vs f16"},
      {m_binding, "variable i vs j"},
      {m_region, "read region of B, dim 0"},
      {m_name, "name matmul vs matmul2"},
      {m_scope, "buffer C scope global vs shared"},
  };
  dg_func *f = matmul(16);
  uint64_t h = ir_func_hash(f);
  for (size_t q = 0; q < DG_ARRAY_LEN(cases); q++) {
    dg_func *g = ir_func_clone(f);
    cases[q].fn(g);
    char why[256] = "";
    CHECK_MSG(!ir_func_equal(f, g), "case %zu: still equal", q);
    CHECK_MSG(!ir_func_equal_explain(f, g, why, sizeof why), "case %zu", q);
    CHECK_MSG(strstr(why, cases[q].want), "case %zu: explanation '%s' lacks '%s'", q, why,
              cases[q].want);
    CHECK_MSG(ir_func_hash(g) != h, "case %zu: same hash", q);
    ir_func_free(g);
  }
  /* a tiny buffer for the explanation truncates without overflowing */
  dg_func *g = ir_func_clone(f);
  m_const(g);
  char small[8];
  CHECK(!ir_func_equal_explain(f, g, small, sizeof small));
  CHECK(strlen(small) == 7);
  ir_func_free(g);
  ir_func_free(f);
}

DG_TEST(ir_expr_equal_by_pointer) {
  dg_func *f = ir_func_new("e");
  dg_var *x = ir_var_new(f, "x", DG_I32), *x2 = ir_var_new(f, "x", DG_I32);
  dg_expr *a = ir_add(f, ir_var(f, x), ir_int(f, 1));
  dg_expr *b = ir_add(f, ir_var(f, x), ir_int(f, 1));
  CHECK(ir_expr_equal(a, b));
  CHECK(!ir_expr_equal(a, ir_add(f, ir_var(f, x2), ir_int(f, 1)))); /* same name, other var */
  CHECK(!ir_expr_equal(a, ir_add(f, ir_var(f, x), ir_int(f, 2))));
  CHECK(!ir_expr_equal(a, ir_sub(f, ir_var(f, x), ir_int(f, 1))));
  CHECK(!ir_expr_equal(ir_int_t(f, 1, DG_I64), ir_int(f, 1)));
  CHECK(!ir_expr_equal(ir_float(f, 0.0, DG_F32), ir_float(f, -0.0, DG_F32)));
  CHECK(ir_expr_equal(ir_float(f, 0.5, DG_F32), ir_float(f, 0.5, DG_F32)));
  ir_func_free(f);
}

/* ---- substitution -------------------------------------------------------- */

DG_TEST(ir_subst) {
  dg_func *f = matmul(16);
  dg_func *before = ir_func_clone(f);
  dg_stmt *li = loop_at(f, 0), *lj = loop_at(f, 1);
  dg_var *i = li->loop_var, *j = lj->loop_var;
  dg_var *i0 = ir_var_new(f, "i0", DG_I32), *i1 = ir_var_new(f, "i1", DG_I32);
  dg_expr *to = ir_add(f, ir_mul(f, ir_var(f, i0), ir_int(f, 4)), ir_var(f, i1));
  dg_subst m = {i, to};
  /* expressions: the unchanged are returned as they are */
  dg_expr *e = ir_add(f, ir_var(f, i), ir_var(f, j));
  dg_expr *r = ir_subst_expr(f, e, &m, 1);
  CHECK(r != e && r->b == e->b && r->a == to);
  CHECK(ir_expr_uses_var(r, i0) && ir_expr_uses_var(r, j) && !ir_expr_uses_var(r, i));
  CHECK(ir_expr_uses_var(e, i));
  dg_expr *ej = ir_mul(f, ir_var(f, j), ir_int(f, 3));
  CHECK(ir_subst_expr(f, ej, &m, 1) == ej);
  dg_expr *ld = ir_load(f, f->params[0], (dg_expr *[]){ir_var(f, i), ir_int(f, 0)}, 2);
  dg_expr *ld2 = ir_subst_expr(f, ld, &m, 1);
  CHECK(ld2 != ld && ld2->args[0] == to && ld2->args[1] == ld->args[1] && ld->args[0]->var == i);
  /* statements: the block's binding of vi changes, the original does not */
  dg_stmt *body = ir_subst_stmt(f, lj, &m, 1);
  CHECK(body != lj);
  dg_block *b2 = body->body->body->block;
  CHECK(b2 != ir_find_block(f, "C"));
  CHECK(b2->iters[0].binding == to);
  CHECK(b2->iters[1].binding == ir_find_block(f, "C")->iters[1].binding);
  CHECK(b2->body == ir_find_block(f, "C")->body); /* untouched: shared */
  CHECK(ir_func_equal(f, before));
  /* a map that touches nothing returns the statement itself */
  dg_subst none = {i0, ir_int(f, 0)};
  CHECK(ir_subst_stmt(f, f->body, &none, 1) == f->body);
  /* substituting the block's iteration variables rewrites its accesses */
  dg_block *bc = ir_find_block(f, "C");
  dg_subst iv = {bc->iters[0].var, ir_int(f, 3)};
  dg_stmt *bs = ir_subst_stmt(f, loop_at(f, 3), &iv, 1);
  CHECK(bs->block->body->idx[0]->kind == DG_EXPR_INT && bs->block->body->idx[0]->ival == 3);
  CHECK(bs->block->reads[0].min[0]->kind == DG_EXPR_INT);
  CHECK(bc->body->idx[0]->kind == DG_EXPR_VAR);
  /* and the simplifier brings split indices back */
  dg_ranges rg = {0};
  ir_ranges_push(&rg, i0, 0, 3);
  ir_ranges_push(&rg, i1, 0, 3);
  dg_expr *q = ir_simplify(f, ir_bin(f, DG_EXPR_FLOORDIV, r->a, ir_int(f, 4)), &rg);
  CHECK(q->kind == DG_EXPR_VAR && q->var == i0);
  ir_func_free(before);
  ir_func_free(f);
}

/* ---- the verifier -------------------------------------------------------- */

DG_TEST(ir_verify_accepts_valid) {
  dg_status st;
  dg_func *f = matmul(4);
  CHECK(ir_verify(f, &st));
  CHECK_OK(st);
  ir_func_free(f);
  f = two_stage();
  CHECK(ir_verify(f, &st));
  CHECK_OK(st);
  /* a bound loop and a vthread are fine; an if with a bool condition too */
  ir_func_free(f);
  f = matmul(4);
  dg_stmt *li = loop_at(f, 0);
  li->loop_kind = DG_LOOP_THREAD;
  li->tag = DG_TAG_BLOCK_X;
  dg_block *b = ir_find_block(f, "C");
  b->body = ir_if(f, ir_bin(f, DG_EXPR_LT, ir_var(f, b->iters[0].var), ir_int(f, 3)), b->body, NULL);
  CHECK(ir_verify(f, &st));
  CHECK_OK(st);
  ir_func_free(f);
}

typedef void (*breaker)(dg_func *f);

static void b_root_name(dg_func *f) { ir_func_root(f)->name = "main"; }
static void b_dup_var(dg_func *f) { loop_at(f, 1)->loop_var->name = "i"; }
static void b_dup_buf(dg_func *f) { f->params[1]->name = "A"; }
static void b_dup_block(dg_func *f) {
  /* a second nest with a block of the same name */
  dg_block *root = ir_func_root(f);
  dg_var *v = ir_var_new(f, "z", DG_I32);
  dg_block *b = ir_block_new(f, "C");
  dg_stmt *two[2];
  b->body = ir_seq(f, two, 0);
  two[0] = root->body;
  two[1] = ir_for(f, v, 2, DG_LOOP_SERIAL, DG_TAG_NONE, ir_block_stmt(f, b));
  root->body = ir_seq(f, two, 2);
}
static void b_undefined_var(dg_func *f) {
  dg_var *stray = ir_var_new(f, "stray", DG_I32);
  dg_block *b = ir_find_block(f, "C");
  b->body->idx[0] = ir_var(f, stray);
}
static void b_store_dtype(dg_func *f) {
  dg_block *b = ir_find_block(f, "C");
  b->body->value = ir_int(f, 1);
}
static void b_load_rank(dg_func *f) {
  dg_block *b = ir_find_block(f, "C");
  dg_expr *prod = b->body->value->b;
  prod->a->nargs = 1; /* A[vi] on a 2-D buffer */
}
static void b_binding_own_iter(dg_func *f) {
  dg_block *b = ir_find_block(f, "C");
  b->iters[1].binding = ir_var(f, b->iters[0].var);
}
static void b_binding_load(dg_func *f) {
  dg_block *b = ir_find_block(f, "C");
  dg_expr *ix[2] = {ir_int(f, 0), ir_int(f, 0)};
  b->iters[1].binding = ir_cast(f, DG_I32, ir_load(f, f->params[0], ix, 2));
}
static void b_binding_out_of_scope(dg_func *f) {
  /* vi bound to the loop variable of another nest */
  dg_var *o = ir_var_new(f, "other", DG_I32);
  ir_find_block(f, "C")->iters[0].binding = ir_var(f, o);
}
static void b_extent(dg_func *f) { loop_at(f, 2)->extent = 0; }
static void b_iter_extent(dg_func *f) { ir_find_block(f, "C")->iters[1].extent = -1; }
static void b_store_in_root(dg_func *f) {
  dg_expr *ix[2] = {ir_int(f, 0), ir_int(f, 0)};
  dg_block *root = ir_func_root(f);
  dg_stmt *two[2] = {ir_store(f, f->params[2], ix, 2, ir_float(f, 0.0, DG_F32)), root->body};
  root->body = ir_seq(f, two, 2);
}
static void b_store_unwritten(dg_func *f) {
  dg_block *b = ir_find_block(f, "C");
  b->body->buf = f->params[1];
}
static void b_alloc_outside(dg_func *f) {
  /* T is allocated by block T but read by block D */
  dg_block *t = ir_find_block(f, "T"), *root = ir_func_root(f);
  t->allocs = root->allocs;
  t->n_allocs = 1;
  root->n_allocs = 0;
}
static void b_thread_tag(dg_func *f) { loop_at(f, 0)->tag = DG_TAG_THREAD_X; }
static void b_bad_op(dg_func *f) {
  dg_block *b = ir_find_block(f, "C");
  b->body->value->kind = DG_EXPR_FLOORDIV; /* on floats */
}
static void b_predicate(dg_func *f) { ir_find_block(f, "C")->predicate = ir_int(f, 1); }
static void b_foreign_buffer(dg_func *f) {
  int64_t sh[2] = {4, 4};
  dg_buffer *x = ir_buffer_new(f, "X", DG_F32, 2, sh, DG_SCOPE_GLOBAL);
  ir_find_block(f, "C")->reads[0].buf = x;
}

DG_TEST(ir_verify_each_violation) {
  static const struct {
    breaker fn;
    bool two_stage;
    const char *want;
  } cases[] = {
      {b_root_name, false, "the root block is named \"main\""},
      {b_dup_var, false, "block \"root\", loop i: variable name i is defined twice"},
      {b_dup_buf, false, "buffer name A is used twice"},
      {b_dup_block, false, "block name C is used twice"},
      {b_undefined_var, false, "block \"C\": variable stray is not defined in scope"},
      {b_store_dtype, false, "block \"C\": store of a i32 value to C of dtype f32"},
      {b_load_rank, false, "load of A with 1 indices, buffer has rank 2"},
      {b_binding_own_iter, false, "block \"C\", binding of vj: uses the block's own iteration variable vi"},
      {b_binding_load, false, "block \"C\", binding of vj: reads buffer A"},
      {b_binding_out_of_scope, false,
       "block \"C\", binding of vi: variable other is not defined in scope"},
      {b_extent, false, "block \"root\", loop k: loop extent 0 is not positive"},
      {b_iter_extent, false, "block \"C\": iteration variable vj has extent -1"},
      {b_store_in_root, false, "store to C outside any block but the root"},
      {b_store_unwritten, false, "block \"C\": store to B, which the block neither writes"},
      {b_alloc_outside, true, "block \"D\": read of buffer T outside the block that allocates it"},
      {b_thread_tag, false, "loop i: loop kind serial with thread tag 'threadIdx.x'"},
      {b_bad_op, false, "// of f32 operands"},
      {b_predicate, false, "predicate is not bool"},
      {b_foreign_buffer, false, "read of buffer X, which is neither a parameter nor allocated"},
  };
  for (size_t q = 0; q < DG_ARRAY_LEN(cases); q++) {
    dg_func *f = cases[q].two_stage ? two_stage() : matmul(4);
    dg_status st;
    CHECK_MSG(ir_verify(f, &st), "case %zu: valid before the change: %s", q, st.msg);
    cases[q].fn(f);
    bool ok = ir_verify(f, &st);
    CHECK_MSG(!ok && st.code == DG_ERR_INVALID, "case %zu: accepted", q);
    CHECK_MSG(strstr(st.msg, cases[q].want), "case %zu: message '%s' lacks '%s'", q, st.msg,
              cases[q].want);
    ir_func_free(f);
  }
  /* a kernel without a body */
  dg_func *f = ir_func_new("empty");
  dg_status st;
  CHECK(!ir_verify(f, &st));
  CHECK_ERR(st, "not a root block");
  ir_func_free(f);
}
