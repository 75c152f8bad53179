/* graph.c: the TSEL graph as data: construction (used by the parser and by
 * lift), deep copies of operand values into the graph's arena, and the
 * small accessors of the public API. A graph owns one arena; lines keep
 * the document order, edits are also listed in replay order. */
#include <string.h>

#include "tsel/tsel_impl.h"

tsel_graph *tsel_graph_new(const char *kernel) {
  tsel_graph *g = dg_calloc(1, sizeof *g);
  g->arena = dg_arena_new();
  g->kernel = dg_arena_strdup(g->arena, kernel ? kernel : "");
  return g;
}

void tsel_graph_free(tsel_graph *g) {
  if (!g) return;
  dg_arena_free(g->arena);
  free(g->edits);
  free(g->lines);
  free(g);
}

const char *tsel_graph_kernel(const tsel_graph *g) { return g->kernel; }
int tsel_graph_edit_count(const tsel_graph *g) { return g->n_edits; }

tsel_val tsel_val_copy(dg_arena *a, const tsel_val *v) {
  tsel_val c = *v;
  if (v->s) c.s = dg_arena_strdup(a, v->s);
  if (v->kind == TV_LIST) {
    c.items = DG_ANEWN(a, tsel_val, v->n ? v->n : 1);
    for (int i = 0; i < v->n; i++) c.items[i] = tsel_val_copy(a, &v->items[i]);
  }
  return c;
}

static tsel_line *add_line(tsel_graph *g) {
  if (g->n_lines == g->cap_lines) {
    g->cap_lines = g->cap_lines ? 2 * g->cap_lines : 32;
    g->lines = dg_realloc(g->lines, sizeof(tsel_line) * (size_t)g->cap_lines);
  }
  tsel_line *l = &g->lines[g->n_lines++];
  memset(l, 0, sizeof *l);
  l->line = g->n_lines + 1; /* the header is line 1 */
  return l;
}

tsel_edit *tsel_graph_add_edit(tsel_graph *g, const tsel_edit *e) {
  if (g->n_edits == g->cap_edits) {
    g->cap_edits = g->cap_edits ? 2 * g->cap_edits : 32;
    g->edits = dg_realloc(g->edits, sizeof(tsel_edit) * (size_t)g->cap_edits);
  }
  tsel_edit *d = &g->edits[g->n_edits++];
  *d = *e;
  d->args = DG_ANEWN(g->arena, tsel_val, e->n_args ? e->n_args : 1);
  for (int i = 0; i < e->n_args; i++) d->args[i] = tsel_val_copy(g->arena, &e->args[i]);
  d->kws = DG_ANEWN(g->arena, tsel_kw, e->n_kws ? e->n_kws : 1);
  for (int i = 0; i < e->n_kws; i++) {
    d->kws[i] = e->kws[i];
    d->kws[i].key = dg_arena_strdup(g->arena, e->kws[i].key);
    d->kws[i].val = tsel_val_copy(g->arena, &e->kws[i].val);
  }
  tsel_line *l = add_line(g);
  l->kind = TL_EDIT;
  l->edit = g->n_edits - 1;
  if (!d->line) d->line = l->line;
  return d;
}

void tsel_graph_add_why(tsel_graph *g, const int *refs, int n, const char *text) {
  tsel_line *l = add_line(g);
  l->kind = TL_WHY;
  l->refs = DG_ANEWN(g->arena, int, n ? n : 1);
  if (n) memcpy(l->refs, refs, sizeof(int) * (size_t)n);
  l->ref_cols = DG_ANEWN(g->arena, int, n ? n : 1);
  l->n_refs = n;
  l->text = dg_arena_strdup(g->arena, text);
}

void tsel_graph_add_expect(tsel_graph *g, const char *text) {
  int num = 1;
  for (int i = 0; i < g->n_lines; i++)
    if (g->lines[i].kind == TL_EXPECT) num++;
  tsel_line *l = add_line(g);
  l->kind = TL_EXPECT;
  l->num = num;
  l->text = dg_arena_strdup(g->arena, text);
}

void tsel_graph_strip_explanations(tsel_graph *g) {
  int k = 0;
  for (int i = 0; i < g->n_lines; i++)
    if (g->lines[i].kind != TL_WHY && g->lines[i].kind != TL_EXPECT) g->lines[k++] = g->lines[i];
  g->n_lines = k;
}
