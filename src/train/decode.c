/* decode.c: writing a TSEL graph for a kernel with the model, constrained.
 * The C reference's KV cache (nn_kv_*) is fed the prompt; then, step by
 * step: the text the checker forces (the header, the edit ids `tN`) is
 * encoded and fed to the model without sampling; otherwise the mask gives
 * the tokens that keep the graph well-formed and well-typed, the next
 * token is drawn from the model's distribution over those alone (the
 * logits of the allowed ids, in id order, through nn_sample_token: the
 * same temperature, top-k and top-p), and its bytes are fed to the
 * checker. <|end|> ends the graph, and is allowed only where it is
 * complete. When the token budget is spent first, the checker's completion
 * is appended as text (the model is not run on it), so every constrained
 * output is a complete graph. Deterministic for a seed: the draws come from one RNG
 * (the one nn_generate gives row 0).
 *
 * A trailing space of forced text is left to the model (the mask allows
 * only tokens that start with it): the tokenizer joins a space to the word
 * after it (` tile`), and the model reads what it was trained on.
 *
 * The mask knows types and kernel facts, not what replaying the schedule
 * does (whether two loops are still nested where a fuse names them,
 * whether the postprocessors accept the threads of a block). A guard
 * given by the caller judges each complete edit line on the graph so far;
 * a refused line is taken back: a stack holds, for the start of each
 * accepted line, the checker's saved state, the KV cache's position and
 * the logits there, so going back costs no model work. The line is then
 * written again, sampled at retry_temperature at least (a greedy draw
 * would write it again as it was); after line_retries refusals the line
 * before it is taken back too, and after max_backtracks in all the guard
 * is no longer asked (the gates after decoding still judge the graph).
 * A guard may name the earlier line to blame (the tile whose factors set
 * the threads that a later line finds out of bounds): the lines after it
 * are dropped at once and the blamed line is written again. */
#include <string.h>

#include "dragon/train.h"

void train_decode_opts_default(train_decode_opts *o) {
  memset(o, 0, sizeof *o);
  nn_sample_opts_default(&o->sample);
  o->sample.max_tokens = 2048;
  o->unconstrained = false;
  o->explain = true;
  o->explain_after = false;
  o->guard = NULL;
  o->guard_ctx = NULL;
  o->line_retries = 4;
  o->max_backtracks = 64;
  o->retry_temperature = 1.0f;
}

typedef struct {
  const nn_model *m;
  nn_kv_cache kv;
  int used, budget;
  train_decode_trace *trace; /* every token after the prompt, or NULL */
} decoder;

static void trace_put(decoder *d, const int32_t *ids, int n, bool sampled) {
  train_decode_trace *t = d->trace;
  if (!t) return;
  if (t->n + n > t->cap) {
    t->cap = (t->n + n) * 2 + 64;
    t->ids = dg_realloc(t->ids, sizeof *t->ids * (size_t)t->cap);
    t->sampled = dg_realloc(t->sampled, (size_t)t->cap);
  }
  for (int i = 0; i < n; i++) {
    t->ids[t->n] = ids[i];
    t->sampled[t->n++] = sampled;
  }
}

/* Feeds tokens to the model: forced text (sampled false) or a drawn token. */
static void feed_model(decoder *d, const int32_t *ids, int n, bool sampled) {
  nn_kv_feed(&d->kv, 0, ids, n);
  d->used += n;
  trace_put(d, ids, n, sampled);
}

void train_decode_trace_free(train_decode_trace *t) {
  free(t->ids);
  free(t->sampled);
  memset(t, 0, sizeof *t);
}

static char *unconstrained(decoder *d, tok_tokenizer *tok, const char *header, const train_decode_opts *o,
                           dg_rng *rng, train_decode_stats *stats, dg_status *st) {
  int V = d->m->cfg.vocab_size;
  int32_t end = tok_special(tok, TOK_END);
  dg_str text;
  dg_str_init(&text);
  dg_str_puts(&text, header);
  tok_ids e = {0};
  if (!tok_encode(tok, header, strlen(header), &e, st)) {
    dg_str_free(&text);
    return NULL;
  }
  if ((int)e.len < d->budget) {
    feed_model(d, e.data, (int)e.len, false);
    stats->n_forced += (int)e.len;
    while (d->used < d->budget) {
      int32_t t = nn_sample_token(nn_kv_logits(&d->kv, 0), V, &o->sample, rng);
      if (t == end) {
        trace_put(d, &t, 1, true);
        break;
      }
      size_t len;
      const uint8_t *b = tok_token_bytes(tok, t, &len);
      if (b) dg_str_putn(&text, (const char *)b, len);
      stats->n_sampled++;
      if (d->used + 1 >= d->budget) break;
      feed_model(d, &t, 1, true);
    }
  }
  tok_ids_free(&e);
  return dg_str_take(&text);
}

/* The why/expect lines of a finished graph from the compiler's facts
 * (tsel_explain), replacing any it has; a graph that does not check
 * against the kernel is left as it is (the gates say why). */
static void explain_graph(char **text, const dg_func *kernel) {
  dg_status st;
  tsel_graph *g = tsel_parse(*text, NULL, &st);
  if (!g) return;
  if (tsel_explain(g, kernel, NULL, &st)) {
    free(*text);
    *text = tsel_print(g);
  }
  tsel_graph_free(g);
}

/* The start of an accepted line: where a refused line goes back to. */
typedef struct {
  tsel_prefix *saved;
  int pos, used, tries;
  float *logits;
} line_start;

typedef struct {
  line_start *v;
  int n, cap, V;
} line_stack;

static void stack_push(line_stack *s, const tsel_prefix *p, const decoder *d) {
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 64;
    s->v = dg_realloc(s->v, sizeof *s->v * (size_t)s->cap);
  }
  line_start *l = &s->v[s->n++];
  l->saved = tsel_prefix_save(p);
  l->pos = d->kv.pos[0];
  l->used = d->used;
  l->tries = 0;
  l->logits = dg_malloc(sizeof(float) * (size_t)s->V);
  memcpy(l->logits, nn_kv_logits(&d->kv, 0), sizeof(float) * (size_t)s->V);
}

static void stack_pop(line_stack *s) {
  line_start *l = &s->v[--s->n];
  tsel_prefix_free(l->saved);
  free(l->logits);
}

static void stack_free(line_stack *s) {
  while (s->n > 0) stack_pop(s);
  free(s->v);
}

/* Takes the refused line back: to the start of the top line (or of edit
 * back_to, when the guard blamed an earlier one: s->v[k] is the start of
 * edit k + 1), or, once that has been refused line_retries times, to the
 * start of an earlier one. */
static void take_back(line_stack *s, tsel_prefix *p, decoder *d, int line_retries, int back_to) {
  while (back_to > 0 && s->n > back_to) stack_pop(s);
  line_start *l = &s->v[s->n - 1];
  l->tries++;
  while (l->tries > line_retries && s->n > 1) {
    stack_pop(s);
    l = &s->v[s->n - 1];
    l->tries++;
  }
  tsel_prefix_restore(p, l->saved);
  nn_kv_rewind(&d->kv, 0, l->pos, l->logits);
  d->used = l->used;
  if (d->trace) d->trace->n = l->used;
}

char *train_decode_graph(const nn_model *m, tok_tokenizer *tok, tsel_mask *mask,
                         const int32_t *prompt, int n_prompt, const dg_func *kernel,
                         const char *spec, tsel_target target, const train_decode_opts *o,
                         uint64_t seed, train_decode_stats *stats, dg_status *st) {
  dg_status_ok(st);
  train_decode_stats local;
  if (!stats) stats = &local;
  memset(stats, 0, sizeof *stats);
  int V = m->cfg.vocab_size, maxT = m->cfg.max_seq_len;
  if (tok_vocab_size(tok) != V) {
    dg_fail(st, DG_ERR_INVALID, "tsel decode: the tokenizer has %d ids, the model %d", tok_vocab_size(tok), V);
    return NULL;
  }
  if (!o->unconstrained && (!mask || tsel_mask_vocab_size(mask) != V)) {
    dg_fail(st, DG_ERR_INVALID, "tsel decode: the mask is not of the model's vocabulary");
    return NULL;
  }
  if (n_prompt < 1 || n_prompt >= maxT) {
    dg_fail(st, DG_ERR_INVALID, "tsel decode: the prompt has %d tokens; the model takes 1 to %d", n_prompt, maxT - 1);
    return NULL;
  }
  for (int i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= V) {
      dg_fail(st, DG_ERR_INVALID, "tsel decode: prompt token %d = %d is outside the vocabulary", i, (int)prompt[i]);
      return NULL;
    }
  if (o->sample.max_tokens < 1) {
    dg_fail(st, DG_ERR_INVALID, "tsel decode: max_tokens must be >= 1");
    return NULL;
  }
  tsel_prefix *p = tsel_prefix_new(kernel, spec, target, st);
  if (!p) return NULL;
  tsel_prefix_set_explain(p, o->explain);
  decoder d = {.m = m, .trace = o->trace};
  if (d.trace) d.trace->n = 0;
  int T = n_prompt + o->sample.max_tokens;
  if (T > maxT) T = maxT;
  d.budget = T - n_prompt;
  if (!nn_kv_init(&d.kv, m, 1, T, st)) {
    tsel_prefix_free(p);
    return NULL;
  }
  nn_kv_feed(&d.kv, 0, prompt, n_prompt);
  dg_rng base, rng;
  dg_rng_seed(&base, seed);
  rng = dg_rng_fork(&base);
  char *result = NULL;
  if (o->unconstrained) {
    result = unconstrained(&d, tok, tsel_prefix_forced(p), o, &rng, stats, st);
    goto done;
  }
  int32_t end = tok_special(tok, TOK_END);
  float *z = dg_malloc(sizeof(float) * (size_t)V);
  int32_t *ids = dg_malloc(sizeof(int32_t) * (size_t)V);
  uint8_t *allowed = dg_malloc((size_t)V);
  dg_str fin, forced;
  dg_str_init(&fin);
  dg_str_init(&forced);
  tok_ids e = {0};
  bool ok = true, finish = false;
  /* the guard: the start of every accepted line, the edits judged so far */
  line_stack lines = {.V = V};
  bool guarding = o->guard != NULL;
  int judged = 0;
  bool retrying = false;
  nn_sample_opts retry = o->sample;
  if (retry.temperature < o->retry_temperature) retry.temperature = o->retry_temperature;
  if (guarding) stack_push(&lines, p, &d);
  while (ok && !finish) {
    /* a newly complete edit line goes to the guard */
    if (guarding && tsel_prefix_edit_count(p) > judged) {
      size_t len;
      const char *text = tsel_prefix_committed(p, &len);
      double g0 = dg_now();
      int back_to = 0;
      bool pass = o->guard(o->guard_ctx, text, len, tsel_prefix_postprocessed(p), &back_to);
      stats->guard_secs += dg_now() - g0;
      stats->n_guarded++;
      if (pass) {
        judged = tsel_prefix_edit_count(p);
        retrying = false;
        stack_push(&lines, p, &d);
      } else if (stats->n_backtracks >= o->max_backtracks) {
        guarding = false;
        stats->guard_gave_up = true;
      } else {
        stats->n_backtracks++;
        stats->n_blamed += back_to > 0 && back_to < lines.n;
        take_back(&lines, p, &d, o->line_retries, back_to > 0 && back_to < lines.n ? back_to : 0);
        judged = tsel_prefix_edit_count(p);
        retrying = true;
      }
      continue;
    }
    /* forced text, less a trailing space */
    dg_str_clear(&forced);
    dg_str_puts(&forced, tsel_prefix_forced(p));
    while (forced.len > 0 && forced.s[forced.len - 1] == ' ') forced.s[--forced.len] = 0;
    if (forced.len > 0) {
      e.len = 0;
      if (!(ok = tok_encode(tok, forced.s, forced.len, &e, st))) break;
      if (d.used + (int)e.len + 1 > d.budget) {
        finish = true;
      } else if (!tsel_prefix_feed(p, forced.s, forced.len)) {
        ok = dg_fail(st, DG_ERR_RUNTIME, "tsel decode: the checker refused its own forced text");
      } else {
        feed_model(&d, e.data, (int)e.len, false);
        stats->n_forced += (int)e.len;
      }
      continue;
    }
    if (d.used + 1 > d.budget) { /* no room for another token */
      finish = true;
      continue;
    }
    double t0 = dg_now();
    int n = tsel_mask_compute(mask, p, allowed);
    stats->mask_secs += dg_now() - t0;
    stats->n_masks++;
    if (n == 0) {
      ok = dg_fail(st, DG_ERR_RUNTIME, "tsel decode: no token may follow (the checker is stuck)");
      break;
    }
    const float *logits = nn_kv_logits(&d.kv, 0);
    int nz = 0;
    for (int j = 0; j < V; j++)
      if (allowed[j]) {
        z[nz] = logits[j];
        ids[nz++] = j;
      }
    int32_t t = ids[nn_sample_token(z, nz, retrying ? &retry : &o->sample, &rng)];
    stats->n_sampled++;
    if (t == end) {
      trace_put(&d, &t, 1, true);
      break;
    }
    size_t len;
    const uint8_t *b = tok_token_bytes(tok, t, &len);
    if (!b || !tsel_prefix_feed(p, (const char *)b, len)) {
      ok = dg_fail(st, DG_ERR_RUNTIME, "tsel decode: the checker refused allowed token %d", (int)t);
      break;
    }
    feed_model(&d, &t, 1, true);
  }
  if (ok && finish) { /* the budget is spent: the checker's completion */
    dg_str_clear(&fin);
    if (!tsel_prefix_completion(p, &fin) || !tsel_prefix_feed(p, fin.s, fin.len))
      ok = dg_fail(st, DG_ERR_RUNTIME, "tsel decode: no completion of the graph found");
    stats->budget_completed = true;
  }
  if (ok && !tsel_prefix_complete(p)) ok = dg_fail(st, DG_ERR_RUNTIME, "tsel decode: the graph is not complete");
  if (ok) {
    size_t len;
    const char *text = tsel_prefix_text(p, &len);
    result = dg_malloc(len + 1);
    memcpy(result, text, len);
    result[len] = 0;
    stats->complete = true;
    if (o->explain_after) explain_graph(&result, kernel);
  }
  stack_free(&lines);
  tok_ids_free(&e);
  dg_str_free(&fin);
  dg_str_free(&forced);
  free(z);
  free(ids);
  free(allowed);
done:
  nn_kv_free(&d.kv);
  tsel_prefix_free(p);
  return result;
}
