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
 * The mask knows types and kernel facts, and of the replayed schedule
 * only what fuse asks of its loops (plain, each the only child of the one
 * before; a loop bound into a reduction goes to threadIdx.* alone), not
 * the rest of what replaying does (whether the postprocessors accept the
 * threads of a block, the shared memory of the tiles). A guard
 * given by the caller judges each complete edit line on the graph so far;
 * a refused line is taken back: a stack holds, for the start of each
 * accepted line, the checker's saved state, the KV cache's position and
 * the logits there, so going back costs no model work. The line is then
 * written again, sampled at retry_temperature at least (a greedy draw
 * would write it again as it was); after line_retries refusals the line
 * before it is taken back too, and after max_backtracks in all the graph
 * is written again from its first edit line, every line now sampled at
 * retry_temperature (restarts times at most; a greedy writer would take
 * the same road again); after that the guard is no longer asked (the gates
 * after decoding still judge the graph).
 * A guard may name the earlier line to blame (the tile whose factors set
 * the threads that a later line finds out of bounds): the lines after it
 * are dropped at once and the blamed line is written again.
 *
 * Several graphs of one prompt are written in step (train_decode_graphs):
 * each is a writer that runs to its next tokens for the model and queues
 * them; one pass of the model (nn_kv_feed_rows) then feeds every writer's
 * queue, so the weights are read once for all of them. The prompt is fed
 * once and its row copied. A writer's draws, checker and guard are its
 * own, so graph i is the one written alone with its seed.
 *
 * On the GPU (train_decode_jobs_cuda) the same writers feed one bf16 KV
 * cache (nn_cuda_kv), a row each: the prompts are prefilled together, and
 * each GPU step takes the next queued token of every row that has one (a
 * queue of forced text takes a step a token while the other rows go on).
 * Between steps the writers run on several host threads, each row always
 * on the same one, with that thread's tokenizer and mask; taking a line
 * back sets the row's position back (the next steps write over the rest)
 * and restores the logits saved on the line stack. */
#include <string.h>

#include "dragon/train.h"
#ifdef DG_HAVE_CUDA
#include <pthread.h>

#include "dragon/nn_cuda.h"
#include "dragon/rt_cuda.h"
#endif

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
  o->restarts = 0;
  o->restart_temperature = 1.0f;
}

/* The GPU's cache as the writers see it: positions on the device's host
 * side, each row's logits after its last fed token copied here. */
typedef struct {
  struct nn_cuda_kv *kv;
  float *logits; /* (rows, V) */
  int V;
} gpu_rows;

typedef struct {
  int V;
  nn_kv_cache *kv; /* the C reference's cache, or */
  gpu_rows *g;     /* the GPU's */
  int row;         /* this graph's row of the cache */
  int used, budget;
  train_decode_trace *trace; /* every token after the prompt, or NULL */
  /* queued: tokens waiting for the model, fed with the other graphs' (the
   * writer's step returns as soon as it queues them); else fed at once */
  bool queued;
  int32_t *pend;
  int n_pend, cap_pend;
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

/* The model's side of a row: its next-token logits, its positions, and
 * going back to an earlier position with the logits saved there. */
static const float *row_logits(const decoder *d) {
  return d->kv ? nn_kv_logits(d->kv, d->row) : d->g->logits + (size_t)d->row * d->V;
}

static int row_pos(const decoder *d) {
#ifdef DG_HAVE_CUDA
  if (!d->kv) return nn_cuda_kv_pos(d->g->kv, d->row);
#endif
  return d->kv->pos[d->row];
}

static void row_rewind(decoder *d, int pos, const float *logits) {
  if (d->kv) {
    nn_kv_rewind(d->kv, d->row, pos, logits);
    return;
  }
#ifdef DG_HAVE_CUDA
  nn_cuda_kv_set_pos(d->g->kv, d->row, pos);
#endif
  memcpy(d->g->logits + (size_t)d->row * d->V, logits, sizeof(float) * (size_t)d->V);
}

/* Feeds tokens to the model: forced text (sampled false) or a drawn token. */
static void feed_model(decoder *d, const int32_t *ids, int n, bool sampled) {
  if (d->queued) {
    if (d->n_pend + n > d->cap_pend) {
      d->cap_pend = (d->n_pend + n) * 2 + 16;
      d->pend = dg_realloc(d->pend, sizeof *d->pend * (size_t)d->cap_pend);
    }
    memcpy(d->pend + d->n_pend, ids, sizeof *ids * (size_t)n);
    d->n_pend += n;
  } else {
    nn_kv_feed(d->kv, d->row, ids, n);
  }
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
  int V = d->V;
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
      int32_t t = nn_sample_token(nn_kv_logits(d->kv, d->row), V, &o->sample, rng);
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

/* The start of an accepted line: where a refused line goes back to. The
 * lines refused from here (each as written, up to its edit line's end)
 * are refused at once if written again: the guard's verdict on the same
 * text would be the same, and a line blamed for a later refusal (a tile
 * whose factors overflow shared memory at the postproc line) must change
 * for the graph to. */
typedef struct {
  tsel_prefix *saved;
  int pos, used, tries;
  size_t at; /* committed text's length here */
  float *logits;
  char **refused;
  int n_refused;
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
  l->pos = row_pos(d);
  l->used = d->used;
  l->tries = 0;
  tsel_prefix_committed(p, &l->at);
  l->refused = NULL;
  l->n_refused = 0;
  l->logits = dg_malloc(sizeof(float) * (size_t)s->V);
  memcpy(l->logits, row_logits(d), sizeof(float) * (size_t)s->V);
}

static void stack_pop(line_stack *s) {
  line_start *l = &s->v[--s->n];
  tsel_prefix_free(l->saved);
  free(l->logits);
  for (int i = 0; i < l->n_refused; i++) free(l->refused[i]);
  free(l->refused);
}

/* Whether text (a line just written from l, up to its edit line's end)
 * was refused from l before. */
static bool refused_before(const line_start *l, const char *text, size_t len) {
  for (int i = 0; i < l->n_refused; i++)
    if (strlen(l->refused[i]) == len && memcmp(l->refused[i], text, len) == 0) return true;
  return false;
}

/* Remembers, at the line start l went back to, the line written from it
 * in text (the committed text before the take-back): from l->at to the end
 * of the next edit line (`tN ` at a line's start). */
static void remember_refused(line_start *l, const char *text, size_t len) {
  if (l->at >= len) return;
  const char *a = text + l->at, *end = text + len, *q = a;
  while (q < end) {
    const char *nl = memchr(q, '\n', (size_t)(end - q));
    const char *stop = nl ? nl + 1 : end;
    bool edit = q[0] == 't' && q + 1 < end && q[1] >= '1' && q[1] <= '9';
    q = stop;
    if (edit) break;
  }
  size_t n = (size_t)(q - a);
  if (n == 0 || refused_before(l, a, n)) return;
  l->refused = dg_realloc(l->refused, sizeof *l->refused * (size_t)(l->n_refused + 1));
  char *c = dg_malloc(n + 1);
  memcpy(c, a, n);
  c[n] = 0;
  l->refused[l->n_refused++] = c;
}

/* Goes back to the start of the first edit line (s->v[0]): every line
 * written since is dropped, with what was refused after it and the
 * narrowings of its tiles; what the first line start refused stays. */
static void restart_graph(line_stack *s, tsel_prefix *p, decoder *d) {
  while (s->n > 1) stack_pop(s);
  line_start *l = &s->v[0];
  l->tries = 0;
  tsel_prefix_unnarrow_after(p, 0);
  tsel_prefix_restore(p, l->saved);
  row_rewind(d, l->pos, l->logits);
  d->used = l->used;
  if (d->trace) d->trace->n = l->used;
}

static void stack_free(line_stack *s) {
  while (s->n > 0) stack_pop(s);
  free(s->v);
}

/* Takes the refused line back: to the start of the top line (or of edit
 * back_to, when the guard blamed an earlier one: s->v[k] is the start of
 * edit k + 1), or, once that has been refused line_retries times, to the
 * start of an earlier one. */
static void take_back(line_stack *s, tsel_prefix *p, decoder *d, int line_retries, int back_to,
                      const tsel_tile_narrowing *narrow) {
  /* the committed text as it is, for the line refused at the start gone back to */
  size_t len;
  const char *now = tsel_prefix_committed(p, &len);
  char *text = dg_malloc(len + 1);
  memcpy(text, now, len);
  text[len] = 0;
  while (back_to > 0 && s->n > back_to) stack_pop(s);
  line_start *l = &s->v[s->n - 1];
  l->tries++;
  while (l->tries > line_retries && s->n > 1) {
    stack_pop(s);
    l = &s->v[s->n - 1];
    l->tries++;
  }
  remember_refused(l, text, len);
  free(text);
  /* the narrowings of the lines dropped go with them; the blamed tile's comes */
  tsel_prefix_unnarrow_after(p, s->n);
  if (back_to > 0 && s->n == back_to && narrow) tsel_prefix_narrow_tile(p, back_to, narrow);
  tsel_prefix_restore(p, l->saved);
  row_rewind(d, l->pos, l->logits);
  d->used = l->used;
  if (d->trace) d->trace->n = l->used;
}

/* One graph being written: the checker, its row of the cache, its draws,
 * the guard's stack. writer_step runs it up to the next tokens for the
 * model (queued in d) or to its end (done). */
typedef struct {
  const train_decode_opts *o;
  tok_tokenizer *tok;
  tsel_mask *mask;
  const dg_func *kernel;
  void *guard_ctx;
  train_decode_stats *stats;
  tsel_prefix *p;
  decoder d;
  dg_rng rng;
  int32_t end;
  float *z;
  int32_t *ids;
  uint8_t *allowed;
  dg_str fin, forced;
  tok_ids e;
  line_stack lines;
  bool guarding, retrying, resampling, started, ok, finish, done;
  int judged;
  int bt_base; /* stats->n_backtracks when the graph was last started again */
  nn_sample_opts retry, restart;
  dg_status st;
  char *result;
} writer;

static void writer_init(writer *w, int V, tok_tokenizer *tok, tsel_mask *mask, const dg_func *kernel,
                        void *guard_ctx, tsel_prefix *p, nn_kv_cache *kv, gpu_rows *g, int row, int budget,
                        const train_decode_opts *o, train_decode_trace *trace, uint64_t seed,
                        train_decode_stats *stats) {
  memset(w, 0, sizeof *w);
  w->o = o;
  w->tok = tok;
  w->mask = mask;
  w->kernel = kernel;
  w->guard_ctx = guard_ctx;
  w->stats = stats;
  memset(stats, 0, sizeof *stats);
  w->p = p;
  w->d = (decoder){.V = V, .kv = kv, .g = g, .row = row, .budget = budget, .trace = trace, .queued = true};
  if (trace) trace->n = 0;
  dg_rng base;
  dg_rng_seed(&base, seed);
  w->rng = dg_rng_fork(&base);
  w->end = tok_special(tok, TOK_END);
  w->z = dg_malloc(sizeof(float) * (size_t)V);
  w->ids = dg_malloc(sizeof(int32_t) * (size_t)V);
  w->allowed = dg_malloc((size_t)V);
  dg_str_init(&w->fin);
  dg_str_init(&w->forced);
  w->lines = (line_stack){.V = V};
  w->guarding = o->guard != NULL;
  w->retry = o->sample;
  if (w->retry.temperature < o->retry_temperature) w->retry.temperature = o->retry_temperature;
  w->restart = o->sample;
  if (w->restart.temperature < o->restart_temperature) w->restart.temperature = o->restart_temperature;
  w->ok = true;
  dg_status_ok(&w->st);
}

/* Runs the graph until it queues tokens for the model (they are fed
 * before the next call: the cache and logits are then up to date) or is
 * done. */
static void writer_step(writer *w) {
  const train_decode_opts *o = w->o;
  train_decode_stats *stats = w->stats;
  tsel_prefix *p = w->p;
  decoder *d = &w->d;
  int V = d->V;
  d->n_pend = 0;
  if (w->done) return;
  if (!w->started) {
    w->started = true;
    if (w->guarding) stack_push(&w->lines, p, d);
  }
  while (w->ok && !w->finish && d->n_pend == 0) {
    /* a newly complete edit line goes to the guard */
    if (w->guarding && tsel_prefix_edit_count(p) > w->judged) {
      size_t len;
      const char *text = tsel_prefix_committed(p, &len);
      const line_start *top = &w->lines.v[w->lines.n - 1];
      int back_to = 0;
      tsel_tile_narrowing narrow = {0};
      bool pass, repeat = top->at <= len && stats->n_repeats < 4 * o->max_backtracks &&
                          refused_before(top, text + top->at, len - top->at);
      if (repeat) {
        pass = false;
        stats->n_repeats++;
      } else {
        double g0 = dg_now();
        pass = o->guard(w->guard_ctx, text, len, tsel_prefix_postprocessed(p), &back_to, &narrow);
        stats->guard_secs += dg_now() - g0;
        stats->n_guarded++;
      }
      if (pass) {
        w->judged = tsel_prefix_edit_count(p);
        w->retrying = false;
        stack_push(&w->lines, p, d);
      } else if (!repeat && stats->n_backtracks - w->bt_base >= o->max_backtracks &&
                 stats->n_restarts < o->restarts) {
        stats->n_restarts++;
        w->bt_base = stats->n_backtracks;
        restart_graph(&w->lines, p, d);
        w->judged = tsel_prefix_edit_count(p);
        w->resampling = true;
      } else if (!repeat && stats->n_backtracks - w->bt_base >= o->max_backtracks) {
        w->guarding = false;
        stats->guard_gave_up = true;
      } else {
        stats->n_backtracks += !repeat;
        bool blamed = back_to > 0 && back_to < w->lines.n;
        stats->n_blamed += blamed;
        bool narrowed = blamed && (narrow.cap > 0 || narrow.hi > 0);
        stats->n_narrowed += narrowed;
        take_back(&w->lines, p, d, o->line_retries, blamed ? back_to : 0, narrowed ? &narrow : NULL);
        w->judged = tsel_prefix_edit_count(p);
        w->retrying = true;
      }
      continue;
    }
    /* forced text, less a trailing space */
    dg_str_clear(&w->forced);
    dg_str_puts(&w->forced, tsel_prefix_forced(p));
    while (w->forced.len > 0 && w->forced.s[w->forced.len - 1] == ' ') w->forced.s[--w->forced.len] = 0;
    if (w->forced.len > 0) {
      w->e.len = 0;
      if (!(w->ok = tok_encode(w->tok, w->forced.s, w->forced.len, &w->e, &w->st))) break;
      if (d->used + (int)w->e.len + 1 > d->budget) {
        w->finish = true;
      } else if (!tsel_prefix_feed(p, w->forced.s, w->forced.len)) {
        w->ok = dg_fail(&w->st, DG_ERR_RUNTIME, "tsel decode: the checker refused its own forced text");
      } else {
        feed_model(d, w->e.data, (int)w->e.len, false);
        stats->n_forced += (int)w->e.len;
      }
      continue;
    }
    if (d->used + 1 > d->budget) { /* no room for another token */
      w->finish = true;
      continue;
    }
    double t0 = dg_now();
    int n = tsel_mask_compute(w->mask, p, w->allowed);
    stats->mask_secs += dg_now() - t0;
    stats->n_masks++;
    if (n == 0) {
      size_t len;
      const char *text = tsel_prefix_text(p, &len), *line = text + len;
      while (line > text && line[-1] != '\n') line--;
      w->ok = dg_fail(&w->st, DG_ERR_RUNTIME, "tsel decode: no token may follow '%.*s' (the checker is stuck)",
                      (int)(text + len - line > 200 ? 200 : text + len - line), line);
      break;
    }
    const float *logits = row_logits(d);
    int nz = 0;
    for (int j = 0; j < V; j++)
      if (w->allowed[j]) {
        w->z[nz] = logits[j];
        w->ids[nz++] = j;
      }
    const nn_sample_opts *so = w->retrying ? &w->retry : w->resampling ? &w->restart : &o->sample;
    int32_t t = w->ids[nn_sample_token(w->z, nz, so, &w->rng)];
    stats->n_sampled++;
    if (t == w->end) {
      trace_put(d, &t, 1, true);
      break;
    }
    size_t len;
    const uint8_t *b = tok_token_bytes(w->tok, t, &len);
    if (!b || !tsel_prefix_feed(p, (const char *)b, len)) {
      w->ok = dg_fail(&w->st, DG_ERR_RUNTIME, "tsel decode: the checker refused allowed token %d", (int)t);
      break;
    }
    feed_model(d, &t, 1, true);
  }
  if (d->n_pend > 0) return;
  /* the end: the text, or why not */
  w->done = true;
  if (w->ok && w->finish) { /* the budget is spent: the checker's completion */
    dg_str_clear(&w->fin);
    if (!tsel_prefix_completion(p, &w->fin) || !tsel_prefix_feed(p, w->fin.s, w->fin.len))
      w->ok = dg_fail(&w->st, DG_ERR_RUNTIME, "tsel decode: no completion of the graph found");
    stats->budget_completed = true;
  }
  if (w->ok && !tsel_prefix_complete(p))
    w->ok = dg_fail(&w->st, DG_ERR_RUNTIME, "tsel decode: the graph is not complete");
  if (w->ok) {
    size_t len;
    const char *text = tsel_prefix_text(p, &len);
    w->result = dg_malloc(len + 1);
    memcpy(w->result, text, len);
    w->result[len] = 0;
    stats->complete = true;
    if (o->explain_after) explain_graph(&w->result, w->kernel);
  }
}

static void writer_free(writer *w) {
  stack_free(&w->lines);
  tok_ids_free(&w->e);
  dg_str_free(&w->fin);
  dg_str_free(&w->forced);
  free(w->z);
  free(w->ids);
  free(w->allowed);
  free(w->d.pend);
  free(w->result);
}

/* What every graph checks first. */
static bool decode_args_ok(int V, tok_tokenizer *tok, tsel_mask *mask, const train_decode_opts *o,
                           dg_status *st) {
  if (tok_vocab_size(tok) != V)
    return dg_fail(st, DG_ERR_INVALID, "tsel decode: the tokenizer has %d ids, the model %d", tok_vocab_size(tok), V);
  if (!o->unconstrained && (!mask || tsel_mask_vocab_size(mask) != V))
    return dg_fail(st, DG_ERR_INVALID, "tsel decode: the mask is not of the model's vocabulary");
  if (o->sample.max_tokens < 1) return dg_fail(st, DG_ERR_INVALID, "tsel decode: max_tokens must be >= 1");
  return true;
}

static bool prompt_ok(const nn_config *cfg, const int32_t *prompt, int n_prompt, dg_status *st) {
  int V = cfg->vocab_size, maxT = cfg->max_seq_len;
  if (n_prompt < 1 || n_prompt >= maxT)
    return dg_fail(st, DG_ERR_INVALID, "tsel decode: the prompt has %d tokens; the model takes 1 to %d", n_prompt,
                   maxT - 1);
  for (int i = 0; i < n_prompt; i++)
    if (prompt[i] < 0 || prompt[i] >= V)
      return dg_fail(st, DG_ERR_INVALID, "tsel decode: prompt token %d = %d is outside the vocabulary", i,
                     (int)prompt[i]);
  return true;
}

/* A job's tokens after its prompt: max_tokens, or the context's room. */
static int job_budget(const train_decode_job *j, const train_decode_opts *o, int maxT) {
  int budget = j->n_prompt + o->sample.max_tokens;
  return (budget > maxT ? maxT : budget) - j->n_prompt;
}

/* A started writer's graph, or why not (where ok is false, the call
 * failed for every job), and its checker freed. */
static void writer_finish(writer *w, tsel_prefix **pf, bool ok, char **text, dg_status *err) {
  if (ok && w->ok) *text = w->result, w->result = NULL;
  else if (ok) *err = w->st;
  writer_free(w);
  tsel_prefix_free(*pf);
  *pf = NULL;
}

/* The end of a call: each started writer's graph, or why not, and the
 * checkers freed. */
static void writers_finish(writer *w, tsel_prefix **pf, const bool *live, int n, bool ok, char **texts,
                           dg_status *errs) {
  for (int i = 0; i < n; i++) {
    if (live[i] && pf[i]) writer_finish(&w[i], &pf[i], ok, &texts[i], &errs[i]);
    tsel_prefix_free(pf[i]);
    pf[i] = NULL;
  }
}

bool train_decode_jobs(const nn_model *m, tok_tokenizer *tok, tsel_mask *mask, const train_decode_job *jobs, int n,
                       tsel_target target, const train_decode_opts *o, char **texts, train_decode_trace *traces,
                       train_decode_stats *stats, dg_status *errs, dg_status *st) {
  dg_status_ok(st);
  for (int i = 0; i < n; i++) {
    texts[i] = NULL;
    if (stats) memset(&stats[i], 0, sizeof stats[i]);
    dg_status_ok(&errs[i]);
  }
  if (n < 1) return true;
  if (!decode_args_ok(m->cfg.vocab_size, tok, mask, o, st)) return false;
  /* rows of the longest context any job needs; a job's own budget is its
   * prompt's room */
  int maxT = m->cfg.max_seq_len, T = 1;
  bool *live = dg_calloc((size_t)n, sizeof *live);
  for (int i = 0; i < n; i++) {
    live[i] = prompt_ok(&m->cfg, jobs[i].prompt, jobs[i].n_prompt, &errs[i]);
    int t = jobs[i].n_prompt + o->sample.max_tokens;
    if (t > maxT) t = maxT;
    if (live[i] && t > T) T = t;
  }
  nn_kv_cache kv;
  if (!nn_kv_init(&kv, m, n, T, st)) {
    free(live);
    return false;
  }
  /* each prompt once (in passes shared by the prompts), copied to the rows
   * of the jobs that repeat it */
  int *src = dg_malloc(sizeof(int) * (size_t)n), *rows = dg_malloc(sizeof(int) * (size_t)n),
      *cnt = dg_malloc(sizeof(int) * (size_t)n);
  const int32_t **toks = dg_malloc(sizeof *toks * (size_t)n);
  int k = 0;
  for (int i = 0; i < n; i++) {
    src[i] = i;
    if (!live[i]) continue;
    for (int j = 0; j < i && src[i] == i; j++)
      if (live[j] && src[j] == j && jobs[j].n_prompt == jobs[i].n_prompt &&
          (jobs[j].prompt == jobs[i].prompt ||
           memcmp(jobs[j].prompt, jobs[i].prompt, sizeof(int32_t) * (size_t)jobs[i].n_prompt) == 0))
        src[i] = j;
    if (src[i] == i) rows[k] = i, toks[k] = jobs[i].prompt, cnt[k++] = jobs[i].n_prompt;
  }
  nn_kv_feed_rows(&kv, rows, toks, cnt, k);
  for (int i = 0; i < n; i++)
    if (live[i] && src[i] != i) nn_kv_copy_row(&kv, i, src[i]);
  writer *w = dg_calloc((size_t)n, sizeof *w);
  train_decode_stats *local = dg_calloc((size_t)n, sizeof *local);
  tsel_prefix **pf = dg_calloc((size_t)n, sizeof *pf);
  for (int i = 0; i < n; i++) {
    if (!live[i]) continue;
    if (!(pf[i] = tsel_prefix_new(jobs[i].kernel, jobs[i].spec, target, &errs[i]))) live[i] = false;
    else {
      tsel_prefix_set_explain(pf[i], o->explain);
      tsel_prefix_set_plan(pf[i], o->plan_first);
    }
  }
  for (int i = 0; i < n; i++) {
    if (!live[i]) continue;
    int budget = job_budget(&jobs[i], o, maxT);
    if (o->unconstrained) {
      /* plain sampling after the forced header, one graph after another */
      decoder d = {.V = m->cfg.vocab_size, .kv = &kv, .row = i, .budget = budget, .trace = traces ? &traces[i] : NULL};
      if (d.trace) d.trace->n = 0;
      dg_rng base, rng;
      dg_rng_seed(&base, jobs[i].seed);
      rng = dg_rng_fork(&base);
      texts[i] = unconstrained(&d, tok, tsel_prefix_forced(pf[i]), o, &rng, stats ? &stats[i] : &local[i],
                               &errs[i]);
    } else {
      writer_init(&w[i], m->cfg.vocab_size, tok, mask, jobs[i].kernel,
                  jobs[i].guard_ctx ? jobs[i].guard_ctx : o->guard_ctx, pf[i], &kv, NULL, i, budget, o, traces ? &traces[i] : NULL, jobs[i].seed, stats ? &stats[i] : &local[i]);
    }
  }
  if (!o->unconstrained) {
    /* in step: each graph runs to its next tokens, then one pass of the
     * model feeds them all */
    for (;;) {
      k = 0;
      for (int i = 0; i < n; i++) {
        if (!live[i]) continue;
        writer_step(&w[i]);
        if (w[i].d.n_pend > 0) rows[k] = i, toks[k] = w[i].d.pend, cnt[k++] = w[i].d.n_pend;
      }
      if (k == 0) break;
      nn_kv_feed_rows(&kv, rows, toks, cnt, k);
    }
    writers_finish(w, pf, live, n, true, texts, errs);
  } else {
    for (int i = 0; i < n; i++) tsel_prefix_free(pf[i]);
  }
  free(pf);
  free(w);
  free(local);
  free(live);
  free(src);
  free(rows);
  free(cnt);
  free(toks);
  nn_kv_free(&kv);
  return true;
}

/* ---- on the GPU ------------------------------------------------------------ */

#ifdef DG_HAVE_CUDA
/* train_decode_jobs_cuda's writers and threads. Thread t runs the writers
 * of rows t, t + threads, ... whose queues are empty to their next tokens;
 * then, between two barriers, thread 0 (the caller, whose the CUDA context
 * is) gives each row whose graph is done the next job (their prompts
 * prefilled together, nn_cuda_kv_refill), feeds one queued token of every
 * row that has one in one step of the GPU cache, and copies the logits of
 * each row whose queue it emptied. A queue of forced text takes a step a
 * token while the other rows go on. */
typedef struct {
  writer *w;          /* (jobs) */
  tsel_prefix **pf;   /* (jobs) */
  const train_decode_job *jobs;
  const bool *live;   /* (jobs) */
  int n_jobs, next;   /* the next job to start */
  int *row_job;       /* (rows) the row's job, or -1 */
  int n, threads;     /* rows */
  int *head;          /* (rows) tokens of each row's queue fed so far */
  nn_cuda_kv *kv;
  gpu_rows *g;
  float *step_logits; /* (rows, V) */
  int32_t *tokens;
  bool *active;
  /* what a job needs to start */
  tok_tokenizer *const *toks;
  tsel_mask *const *masks;
  tsel_target target;
  const train_decode_opts *o;
  train_decode_trace *traces;
  train_decode_stats *stats, *local;
  char **texts;
  dg_status *errs;
  int maxT;
  pthread_barrier_t bar;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool go, stop, failed;
  dg_status err;
  int64_t steps, refills;
  int lock;            /* the GPU's lock (gpu_lock_of), -1 none */
  double lock_wait_s;  /* spent waiting for it */
} gpu_loop;

/* The lock of the GPU the model runs on (gpu_lock.c), held around each of
 * the writers' steps there (launches to logits copied back): a measuring
 * worker beside the writing, an evaluation timing the graphs written
 * before, then times its kernels on a GPU running nothing else, and the
 * writer waits for a job at most. Opened once a process. */
static pthread_once_t gpu_lock_once = PTHREAD_ONCE_INIT;
static int gpu_lock_fd = -1;
static void gpu_lock_open(void) { gpu_lock_fd = rt_gpu_lock_open_device(nn_cuda_current_device()); }
static int gpu_lock_of(void) {
  pthread_once(&gpu_lock_once, gpu_lock_open);
  return gpu_lock_fd;
}

static void gpu_take(gpu_loop *L) {
  double t0 = dg_now();
  rt_gpu_lock(L->lock);
  L->lock_wait_s += dg_now() - t0;
}

typedef struct {
  gpu_loop *L;
  int t;
} gpu_worker;

/* Job j's writer on row r (its prompt is in the row's cache, the logits
 * after it in the row's). False: the job failed before it started
 * (errs[j] says why). */
static bool job_start(gpu_loop *L, int j, int r) {
  const train_decode_job *job = &L->jobs[j];
  if (!(L->pf[j] = tsel_prefix_new(job->kernel, job->spec, L->target, &L->errs[j]))) return false;
  tsel_prefix_set_explain(L->pf[j], L->o->explain);
  tsel_prefix_set_plan(L->pf[j], L->o->plan_first);
  int budget = job_budget(job, L->o, L->maxT);
  int t = r % L->threads;
  writer_init(&L->w[j], L->g->V, L->toks[t], L->masks[t], job->kernel,
              job->guard_ctx ? job->guard_ctx : L->o->guard_ctx, L->pf[j], NULL, L->g, r, budget, L->o,
              L->traces ? &L->traces[j] : NULL, job->seed, L->stats ? &L->stats[j] : &L->local[j]);
  L->row_job[r] = j;
  L->head[r] = 0;
  return true;
}

/* The next live job, or -1. */
static int next_job(gpu_loop *L) {
  while (L->next < L->n_jobs && !L->live[L->next]) L->next++;
  return L->next < L->n_jobs ? L->next++ : -1;
}

/* Rows whose graphs are done give them up (their texts kept) and take the
 * next jobs, prefilled together: once a few rows are free, or when no row
 * decodes. Returns how many rows started. */
static int gpu_refill(gpu_loop *L, int decoding) {
  int n = L->n, free_rows = 0;
  for (int r = 0; r < n; r++) {
    int j = L->row_job[r];
    if (j >= 0 && L->w[j].done) {
      writer_finish(&L->w[j], &L->pf[j], true, &L->texts[j], &L->errs[j]);
      L->row_job[r] = -1;
    }
    free_rows += L->row_job[r] < 0;
  }
  if (free_rows == 0 || L->next >= L->n_jobs) return 0;
  if (decoding > 0 && free_rows < (n + 7) / 8) return 0;
  int *rows = dg_malloc(sizeof(int) * (size_t)free_rows), *lens = dg_malloc(sizeof(int) * (size_t)free_rows);
  int *who = dg_malloc(sizeof(int) * (size_t)free_rows);
  const int32_t **pr = dg_malloc(sizeof *pr * (size_t)free_rows);
  int k = 0;
  for (int r = 0; r < n && L->next < L->n_jobs; r++) {
    if (L->row_job[r] >= 0) continue;
    int j = next_job(L);
    if (j < 0) break;
    rows[k] = r, who[k] = j, pr[k] = L->jobs[j].prompt, lens[k++] = L->jobs[j].n_prompt;
  }
  int started = 0;
  if (k > 0) {
    gpu_take(L);
    bool fed = nn_cuda_kv_refill(L->kv, rows, pr, lens, k, &L->err) &&
               nn_cuda_kv_logits(L->kv, L->step_logits, &L->err);
    rt_gpu_unlock(L->lock);
    if (!fed) {
      L->failed = L->stop = true;
    } else {
      int V = L->g->V;
      L->refills++;
      for (int q = 0; q < k; q++) {
        memcpy(L->g->logits + (size_t)rows[q] * V, L->step_logits + (size_t)rows[q] * V, sizeof(float) * (size_t)V);
        started += job_start(L, who[q], rows[q]);
      }
    }
  }
  free(rows);
  free(lens);
  free(who);
  free(pr);
  return started;
}

static void gpu_feed(gpu_loop *L) {
  int n = L->n, V = L->g->V, k = 0;
  for (int r = 0; r < n; r++) {
    int j = L->row_job[r];
    const decoder *d = j >= 0 ? &L->w[j].d : NULL;
    L->active[r] = d && L->head[r] < d->n_pend;
    L->tokens[r] = L->active[r] ? d->pend[L->head[r]] : 0;
    k += L->active[r];
  }
  int started = gpu_refill(L, k);
  if (L->failed) return;
  if (k == 0) {
    /* nothing to feed: the new rows first write their tokens (a row whose
     * job could not start is free again), or all is done */
    if (started == 0 && L->next >= L->n_jobs) L->stop = true;
    return;
  }
  gpu_take(L);
  bool fed = nn_cuda_kv_step(L->kv, L->tokens, L->active, &L->err) &&
             nn_cuda_kv_logits(L->kv, L->step_logits, &L->err);
  rt_gpu_unlock(L->lock);
  if (!fed) {
    L->failed = L->stop = true;
    return;
  }
  L->steps++;
  for (int r = 0; r < n; r++)
    if (L->active[r] && ++L->head[r] == L->w[L->row_job[r]].d.n_pend)
      memcpy(L->g->logits + (size_t)r * V, L->step_logits + (size_t)r * V, sizeof(float) * (size_t)V);
}

static void *gpu_work(void *arg) {
  gpu_worker *me = arg;
  gpu_loop *L = me->L;
  /* the thread count is known once every thread has been started */
  pthread_mutex_lock(&L->mu);
  while (!L->go) pthread_cond_wait(&L->cv, &L->mu);
  pthread_mutex_unlock(&L->mu);
  for (;;) {
    for (int r = me->t; r < L->n; r += L->threads) {
      int j = L->row_job[r];
      if (j >= 0 && !L->w[j].done && L->head[r] >= L->w[j].d.n_pend) {
        writer_step(&L->w[j]);
        L->head[r] = 0;
      }
    }
    pthread_barrier_wait(&L->bar);
    if (me->t == 0) gpu_feed(L);
    pthread_barrier_wait(&L->bar);
    if (L->stop) break;
  }
  return NULL;
}

/* Runs the loop on the caller and up to threads - 1 more threads. */
static void gpu_run(gpu_loop *L, int threads) {
  pthread_t *th = dg_malloc(sizeof *th * (size_t)threads);
  gpu_worker *wk = dg_malloc(sizeof *wk * (size_t)threads);
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv, NULL);
  int started = 1;
  for (int t = 1; t < threads; t++) {
    wk[t] = (gpu_worker){L, t};
    if (pthread_create(&th[t], NULL, gpu_work, &wk[t]) != 0) break;
    started++;
  }
  L->threads = started;
  pthread_barrier_init(&L->bar, NULL, (unsigned)started);
  pthread_mutex_lock(&L->mu);
  L->go = true;
  pthread_cond_broadcast(&L->cv);
  pthread_mutex_unlock(&L->mu);
  wk[0] = (gpu_worker){L, 0};
  gpu_work(&wk[0]);
  for (int t = 1; t < started; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&L->bar);
  pthread_cond_destroy(&L->cv);
  pthread_mutex_destroy(&L->mu);
  free(th);
  free(wk);
}
#endif

bool train_decode_jobs_cuda(train_cuda *gpu, tok_tokenizer *const *toks, tsel_mask *const *masks, int threads,
                            const train_decode_job *jobs, int n, tsel_target target, const train_decode_opts *o,
                            char **texts, train_decode_trace *traces, train_decode_stats *stats, dg_status *errs,
                            train_decode_gpu_stats *gs, dg_status *st) {
  dg_status_ok(st);
  if (gs) memset(gs, 0, sizeof *gs);
  for (int i = 0; i < n; i++) {
    texts[i] = NULL;
    if (stats) memset(&stats[i], 0, sizeof stats[i]);
    dg_status_ok(&errs[i]);
  }
  if (n < 1) return true;
#ifndef DG_HAVE_CUDA
  (void)gpu, (void)toks, (void)masks, (void)threads, (void)jobs, (void)target, (void)o, (void)traces;
  return dg_fail(st, DG_ERR_RUNTIME, "tsel decode: this dragon was built without CUDA");
#else
  nn_cuda_model *gm = gpu ? train_cuda_model(gpu) : NULL;
  if (!gm) return dg_fail(st, DG_ERR_INVALID, "tsel decode: no GPU model to write with");
  if (threads < 1) return dg_fail(st, DG_ERR_INVALID, "tsel decode: %d threads", threads);
  if (o->unconstrained) return dg_fail(st, DG_ERR_INVALID, "tsel decode: unconstrained writing runs on the CPU");
  if (o->gpu_rows < 0) return dg_fail(st, DG_ERR_INVALID, "tsel decode: %d GPU rows", o->gpu_rows);
  const nn_config *cfg = nn_cuda_model_config(gm);
  int V = cfg->vocab_size, maxT = cfg->max_seq_len, T = 1;
  for (int t = 0; t < threads && t < n; t++)
    if (!decode_args_ok(V, toks[t], masks[t], o, st)) return false;
  double t0 = dg_now();
  bool *live = dg_calloc((size_t)n, sizeof *live);
  int n_live = 0;
  for (int i = 0; i < n; i++) {
    live[i] = prompt_ok(cfg, jobs[i].prompt, jobs[i].n_prompt, &errs[i]);
    n_live += live[i];
    int t = jobs[i].n_prompt + o->sample.max_tokens;
    if (t > maxT) t = maxT;
    if (live[i] && t > T) T = t;
  }
  if (n_live == 0) {
    free(live);
    return true;
  }
  /* the rows: a job each, or o->gpu_rows that the jobs take in turn */
  int R = o->gpu_rows > 0 && o->gpu_rows < n_live ? o->gpu_rows : n_live;
  if (threads > R) threads = R;
  nn_cuda_kv *kv;
  if (!nn_cuda_kv_init(&kv, gm, R, T, st)) {
    free(live);
    return false;
  }
  gpu_loop L = {.n_jobs = n, .n = R, .jobs = jobs, .live = live, .kv = kv, .toks = toks, .masks = masks,
                .target = target, .o = o, .traces = traces, .stats = stats, .texts = texts, .errs = errs,
                .maxT = maxT, .threads = threads, .lock = gpu_lock_of()};
  L.w = dg_calloc((size_t)n, sizeof *L.w);
  L.pf = dg_calloc((size_t)n, sizeof *L.pf);
  L.local = dg_calloc((size_t)n, sizeof *L.local);
  L.row_job = dg_malloc(sizeof(int) * (size_t)R);
  L.head = dg_calloc((size_t)R, sizeof *L.head);
  L.step_logits = dg_malloc(sizeof(float) * (size_t)R * V);
  L.tokens = dg_malloc(sizeof(int32_t) * (size_t)R);
  L.active = dg_malloc((size_t)R);
  /* the first R live jobs' prompts */
  const int32_t **pr = dg_malloc(sizeof *pr * (size_t)R);
  int *lens = dg_malloc(sizeof(int) * (size_t)R), *first = dg_malloc(sizeof(int) * (size_t)R);
  for (int r = 0; r < R; r++) {
    first[r] = next_job(&L);
    pr[r] = jobs[first[r]].prompt;
    lens[r] = jobs[first[r]].n_prompt;
    L.row_job[r] = -1;
  }
  gpu_rows g = {kv, dg_malloc(sizeof(float) * (size_t)R * V), V};
  L.g = &g;
  gpu_take(&L);
  bool ok = nn_cuda_kv_prefill(kv, pr, lens, R, st) && nn_cuda_kv_logits(kv, g.logits, st);
  rt_gpu_unlock(L.lock);
  free(pr);
  free(lens);
  if (gs) gs->prefill_s = dg_now() - t0, gs->rows = R;
  for (int r = 0; ok && r < R; r++) job_start(&L, first[r], r);
  free(first);
  if (ok) {
    double t1 = dg_now();
    gpu_run(&L, threads);
    if (gs)
      gs->steps = L.steps, gs->refills = L.refills, gs->decode_s = dg_now() - t1, gs->threads = L.threads,
      gs->lock_wait_s = L.lock_wait_s;
    if (L.failed) ok = (*st = L.err, false);
  }
  writers_finish(L.w, L.pf, live, n, ok, texts, errs);
  free(L.w);
  free(L.pf);
  free(L.local);
  free(L.row_job);
  free(L.head);
  free(L.step_logits);
  free(L.tokens);
  free(L.active);
  free(live);
  free(g.logits);
  nn_cuda_kv_free(kv);
  return ok;
#endif
}

bool train_decode_graphs(const nn_model *m, tok_tokenizer *tok, tsel_mask *mask, const int32_t *prompt,
                         int n_prompt, const dg_func *kernel, const char *spec, tsel_target target,
                         const train_decode_opts *o, int n, const uint64_t *seeds, char **texts,
                         train_decode_trace *traces, train_decode_stats *stats, dg_status *errs, dg_status *st) {
  dg_status_ok(st);
  if (n > 0 && !prompt_ok(&m->cfg, prompt, n_prompt, st)) return false;
  train_decode_job *jobs = dg_calloc((size_t)(n > 0 ? n : 1), sizeof *jobs);
  for (int i = 0; i < n; i++) jobs[i] = (train_decode_job){prompt, n_prompt, kernel, spec, seeds[i], NULL};
  bool ok = train_decode_jobs(m, tok, mask, jobs, n, target, o, texts, traces, stats, errs, st);
  free(jobs);
  return ok;
}

char *train_decode_graph(const nn_model *m, tok_tokenizer *tok, tsel_mask *mask,
                         const int32_t *prompt, int n_prompt, const dg_func *kernel,
                         const char *spec, tsel_target target, const train_decode_opts *o,
                         uint64_t seed, train_decode_stats *stats, dg_status *st) {
  char *text = NULL;
  dg_status err;
  if (!train_decode_graphs(m, tok, mask, prompt, n_prompt, kernel, spec, target, o, 1, &seed, &text, o->trace,
                           stats, &err, st))
    return NULL;
  if (!text) *st = err;
  return text;
}
