/* mask.c: which tokens may come next, for constrained decoding. The
 * vocabulary's byte strings (tok_token_bytes) are put into one byte trie,
 * laid out flat in depth-first order with each node's subtree end, and the
 * trie is walked with the prefix checker's state: a node whose byte the
 * checker refuses is skipped with its whole subtree, so tokens that share
 * a prefix are checked once, and a token is allowed exactly when feeding
 * all its bytes succeeds. Of the special tokens only <|end|> can be
 * allowed, and only where the graph is complete.
 *
 * The walk keeps one checker state per depth (copied from the parent when
 * a node is entered); the text bytes of the trial states go to the
 * checker's scratch space past its own text, so the checker's state is
 * unchanged by a mask. In free text (why and expect lines), where nearly
 * every token is allowed, the walk carries only the text's few bytes of
 * state and takes whole states again below a newline. */
#include <string.h>

#include "tsel/tsel_impl.h"

typedef struct {
  uint8_t byte;
  bool nl;          /* a newline in its subtree (itself included) */
  uint16_t depth;   /* 1 for the root's children */
  int32_t end;      /* one past the last node of its subtree */
  int32_t tok;      /* a token whose bytes end here, or -1 */
} tnode;

struct tsel_mask {
  int V;
  int32_t end_id;   /* <|end|>, or -1 */
  tnode *nodes;
  int n_nodes;
  int32_t *more;    /* (V) further tokens with the same bytes, -1 ends */
  int max_len;
  unsigned char *states; /* (max_len + 1) checker states */
  size_t state_size;
  tsel_ptext *text_states; /* (max_len + 1) */
  unsigned char *path;     /* (max_len + 1) the bytes of the free-text walk down to a node */
  uint8_t *text_ok;        /* (V) allowed in free text after a whole character, no newline */
  int n_text_ok;
};

typedef struct {
  const uint8_t *b;
  size_t n;
  int32_t id;
} tokb;

static int cmp_tokb(const void *x, const void *y) {
  const tokb *a = x, *b = y;
  size_t n = a->n < b->n ? a->n : b->n;
  int d = memcmp(a->b, b->b, n);
  if (d) return d;
  if (a->n != b->n) return a->n < b->n ? -1 : 1;
  return a->id < b->id ? -1 : a->id > b->id;
}

tsel_mask *tsel_mask_new(const tok_tokenizer *tok, dg_status *st) {
  dg_status_ok(st);
  int V = tok_vocab_size(tok);
  if (V < 1) {
    dg_fail(st, DG_ERR_INVALID, "tsel mask: the vocabulary is empty");
    return NULL;
  }
  tokb *t = dg_calloc((size_t)V, sizeof *t);
  int n = 0;
  for (int32_t id = 0; id < V; id++) {
    size_t len;
    const uint8_t *b = tok_token_bytes(tok, id, &len);
    /* a token longer than a node's depth can count is never allowed */
    if (!b || len == 0 || len > UINT16_MAX || tok_is_special(tok, id)) continue;
    t[n++] = (tokb){b, len, id};
  }
  qsort(t, (size_t)n, sizeof *t, cmp_tokb);
  tsel_mask *m = dg_calloc(1, sizeof *m);
  m->V = V;
  m->end_id = tok_special(tok, TOK_END);
  m->more = dg_malloc(sizeof(int32_t) * (size_t)V);
  for (int i = 0; i < V; i++) m->more[i] = -1;
  DG_VEC(tnode) nodes = {0};
  DG_VEC(int32_t) path = {0}; /* node index at each depth of the current token */
  const tokb *prev = NULL;
  for (int i = 0; i < n; i++) {
    const tokb *k = &t[i];
    size_t lcp = 0;
    if (prev)
      while (lcp < prev->n && lcp < k->n && prev->b[lcp] == k->b[lcp]) lcp++;
    while (path.len > lcp) nodes.data[path.data[--path.len]].end = (int32_t)nodes.len;
    if (prev && lcp == k->n && prev->n == k->n) { /* the same bytes as the previous token */
      int32_t at = nodes.data[path.data[path.len - 1]].tok;
      while (m->more[at] >= 0) at = m->more[at];
      m->more[at] = k->id;
      prev = k;
      continue;
    }
    for (size_t d = lcp; d < k->n; d++) {
      tnode nd = {.byte = k->b[d], .depth = (uint16_t)(d + 1), .tok = -1};
      DG_VEC_PUSH(&path, (int32_t)nodes.len);
      DG_VEC_PUSH(&nodes, nd);
    }
    nodes.data[path.data[path.len - 1]].tok = k->id;
    if ((int)k->n > m->max_len) m->max_len = (int)k->n;
    prev = k;
  }
  while (path.len > 0) nodes.data[path.data[--path.len]].end = (int32_t)nodes.len;
  free(path.data);
  free(t);
  m->nodes = nodes.data;
  m->n_nodes = (int)nodes.len;
  for (int i = m->n_nodes - 1; i >= 0; i--) { /* children come after their parent */
    tnode *nd = &m->nodes[i];
    nd->nl = nd->byte == '\n';
    for (int c = i + 1; c < nd->end && !nd->nl; c = m->nodes[c].end) nd->nl = m->nodes[c].nl;
  }
  m->text_ok = dg_calloc((size_t)V, 1);
  for (int32_t id = 0; id < V; id++) {
    size_t len;
    const uint8_t *b = tok_token_bytes(tok, id, &len);
    if (!b || len == 0 || len > UINT16_MAX || tok_is_special(tok, id)) continue;
    tsel_ptext tx = {0};
    bool ok = true;
    for (size_t i = 0; i < len && ok; i++) ok = tsel_ptext_step(&tx, b[i]);
    m->text_ok[id] = ok;
    m->n_text_ok += ok;
  }
  m->state_size = tsel_pstate_size();
  m->states = dg_malloc(m->state_size * (size_t)(m->max_len + 1));
  m->text_states = dg_malloc(sizeof(tsel_ptext) * (size_t)(m->max_len + 1));
  m->path = dg_malloc((size_t)m->max_len + 1);
  return m;
}

void tsel_mask_free(tsel_mask *m) {
  if (!m) return;
  free(m->nodes);
  free(m->more);
  free(m->states);
  free(m->text_states);
  free(m->path);
  free(m->text_ok);
  free(m);
}

int tsel_mask_vocab_size(const tsel_mask *m) { return m->V; }

static tsel_pstate *state_at(tsel_mask *m, int depth) {
  return (tsel_pstate *)(m->states + m->state_size * (size_t)depth);
}

static int allow(tsel_mask *m, const tnode *nd, uint8_t *allowed) {
  int n = 0;
  for (int32_t id = nd->tok; id >= 0; id = m->more[id]) {
    allowed[id] = 1;
    n++;
  }
  return n;
}

/* The nodes [lo, hi) (a run of subtrees below depth base) from the state
 * at depth base. */
static int walk(tsel_mask *m, tsel_prefix *p, int lo, int hi, uint8_t *allowed) {
  int count = 0;
  for (int i = lo; i < hi;) {
    const tnode *nd = &m->nodes[i];
    tsel_pstate *s = state_at(m, nd->depth);
    tsel_pstate_copy(s, state_at(m, nd->depth - 1));
    if (!tsel_pstate_feed(p, s, nd->byte)) {
      i = nd->end;
      continue;
    }
    count += allow(m, nd, allowed);
    i++;
  }
  return count;
}

/* Free text: a few bytes of state per depth; a newline goes back to
 * whole states for its subtree. After a whole character the tokens
 * without a newline are known in advance (text_ok), and only the paths to
 * newlines are walked. */
static int walk_text(tsel_mask *m, tsel_prefix *p, const tsel_pstate *root, const tsel_ptext *t0,
                     uint8_t *allowed) {
  tsel_ptext *tx = m->text_states;
  tx[0] = *t0;
  int count = 0;
  bool known = t0->need == 0;
  if (known) {
    memcpy(allowed, m->text_ok, (size_t)m->V);
    count = m->n_text_ok;
  }
  for (int i = 0; i < m->n_nodes;) {
    const tnode *nd = &m->nodes[i];
    int d = nd->depth;
    if (known && !nd->nl) {
      i = nd->end;
      continue;
    }
    if (nd->byte == '\n') {
      tsel_pstate *s = state_at(m, d - 1);
      tsel_pstate_copy(s, root);
      tsel_pstate_set_text(p, s, &tx[d - 1], m->path, (size_t)(d - 1));
      count += walk(m, p, i, nd->end, allowed);
      i = nd->end;
      continue;
    }
    tx[d] = tx[d - 1];
    if (!tsel_ptext_step(&tx[d], nd->byte)) {
      i = nd->end;
      continue;
    }
    m->path[d - 1] = nd->byte;
    if (!known) count += allow(m, nd, allowed);
    i++;
  }
  return count;
}

int tsel_mask_compute(tsel_mask *m, tsel_prefix *p, uint8_t *allowed) {
  memset(allowed, 0, (size_t)m->V);
  tsel_pstate *root = tsel_prefix_state(p);
  tsel_prefix_reserve(p, (size_t)m->max_len + 1);
  tsel_ptext t0;
  int count;
  if (tsel_pstate_text(root, &t0)) {
    count = walk_text(m, p, root, &t0, allowed);
  } else {
    tsel_pstate_copy(state_at(m, 0), root);
    count = walk(m, p, 0, m->n_nodes, allowed);
  }
  if (m->end_id >= 0 && tsel_pstate_complete(root)) {
    allowed[m->end_id] = 1;
    count++;
  }
  tsel_prefix_collect(p);
  return count;
}
