/* determined.c: edit lines that the graph so far leaves no choice about.
 *
 * MetaSchedule's multi-level tiling annotates its block with a structure
 * ("SSSRRSRS": each spatial loop tiled into as many loops as there are S,
 * each reduction loop into as many as there are R), tiles every loop of
 * the block, then reorders the tiles level by level: for each letter of
 * the structure, that level's tile of every spatial (or reduction) loop,
 * in loop order. Once the last tile is written the reorder is fixed: in
 * the committed examples it follows the tiles in every one of 1,397
 * tilings. It is a long line (18 handles for a batched matmul) and the
 * model's most frequent structural error, so constrained decoding writes
 * it instead (prefix.c forces it as it forces the edit ids).
 */
#include <string.h>

#include "tsel/tsel_impl.h"

static bool ref_is(const tsel_val *v, int edit, int sub) {
  return v->kind == TV_REF && v->i == edit && v->sub == sub;
}

const char *tsel_tiling_of(const tsel_graph *g, int b) {
  for (int n = 1; n <= g->n_edits; n++) {
    const tsel_edit *e = &g->edits[n - 1];
    if (e->op != TSEL_OP_ANNOTATE || e->n_args != 3 || !ref_is(&e->args[0], b, -1)) continue;
    const tsel_val *k = &e->args[1], *v = &e->args[2];
    bool key = (k->kind == TV_WORD && k->s && strcmp(k->s, "tiling") == 0) ||
               (k->kind == TV_STR && k->s && tsel_ann_alias(k->s) && strcmp(tsel_ann_alias(k->s), "tiling") == 0);
    if (key && v->kind == TV_STR && v->s) return v->s;
  }
  return NULL;
}

enum { MAX_TILED = 16 };

/* Whether edit e names one of the tile edits in tiles[0..n) (its loops
 * are then no longer the tiling's alone). */
static bool names_any(const tsel_val *v, const int *tiles, int n) {
  if (v->kind == TV_LIST) {
    for (int i = 0; i < v->n; i++)
      if (names_any(&v->items[i], tiles, n)) return true;
    return false;
  }
  if (v->kind != TV_REF) return false;
  for (int k = 0; k < n; k++)
    if (tiles[k] && v->i == tiles[k]) return true;
  return false;
}

bool tsel_determined_line(const tsel_graph *g, dg_str *out) {
  if (g->n_edits < 1) return false;
  const tsel_edit *last = &g->edits[g->n_edits - 1];
  if (last->op != TSEL_OP_TILE || last->n_args < 2 || last->args[0].kind != TV_REF) return false;
  /* the loops the last tile came from: `tL loops tB xN` of a tiled block */
  int L = (int)last->args[0].i;
  if (L < 1 || L > g->n_edits) return false;
  const tsel_edit *le = &g->edits[L - 1];
  if (le->op != TSEL_OP_LOOPS || le->n_args != 2 || le->args[0].kind != TV_REF || le->args[0].sub != -1 ||
      le->args[1].kind != TV_COUNT)
    return false;
  int n_loops = (int)le->args[1].i;
  const char *q = tsel_tiling_of(g, (int)le->args[0].i);
  if (!q || n_loops < 1 || n_loops > MAX_TILED) return false;
  int ns = 0, nr = 0;
  for (const char *c = q; *c; c++) {
    if (*c == 'S') ns++;
    else if (*c == 'R') nr++;
    else return false;
  }
  if (ns == 0 || ns == nr) return false;
  /* every loop tiled exactly once, and nothing else done to them */
  int tile_of[MAX_TILED], factors[MAX_TILED];
  for (int k = 0; k < n_loops; k++) tile_of[k] = 0;
  for (int n = L + 1; n <= g->n_edits; n++) {
    const tsel_edit *e = &g->edits[n - 1];
    for (int a = 0; a < e->n_args; a++) {
      const tsel_val *v = &e->args[a];
      if (names_any(v, tile_of, n_loops)) return false;
      if (v->kind == TV_LIST)
        for (int i = 0; i < v->n; i++)
          if (v->items[i].kind == TV_REF && v->items[i].i == L) return false;
      if (v->kind != TV_REF || v->i != L) continue;
      if (e->op != TSEL_OP_TILE || a != 0 || v->sub < 0 || v->sub >= n_loops || tile_of[v->sub] ||
          e->n_args < 2 || e->args[1].kind != TV_LIST)
        return false;
      tile_of[v->sub] = n;
      factors[v->sub] = e->args[1].n;
    }
  }
  for (int k = 0; k < n_loops; k++)
    if (!tile_of[k] || (factors[k] != ns && factors[k] != nr)) return false;
  dg_str_puts(out, "reorder");
  int si = 0, ri = 0;
  for (const char *c = q; *c; c++) {
    bool s = *c == 'S';
    for (int k = 0; k < n_loops; k++)
      if ((factors[k] == ns) == s) dg_str_printf(out, " t%d.%d", tile_of[k], s ? si : ri);
    if (s) si++;
    else ri++;
  }
  return true;
}
