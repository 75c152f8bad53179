/* model_arg.c: what a model argument names (a run directory, whose latest
 * checkpoint is taken, or a model file), its tokenizer (tokenizer.bin
 * beside it unless named), loading both with the check that they belong
 * together, and reading a text file argument; the model as a writer of
 * graphs under the mask (cli_model). Used by every command that runs the
 * model (sample-model, optimize, eval); and the GPU that judges their
 * graphs (--target). */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "dragon/eval.h"
#include "dragon/rt_cuda.h"
#include "dragon/search.h"
#include "dragon/train.h"

static bool is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

bool cli_model_paths(const char *flag, const char *arg, const char *tokp, char **model, char **tok,
                     dg_status *st) {
  struct stat sb;
  if (stat(arg, &sb) != 0)
    return dg_fail(st, DG_ERR_IO, "%s %s: no such run directory or model file", flag, arg);
  char *dir;
  if (is_dir(arg)) {
    /* a model directory (`dragon train export`): its safetensors file;
     * else a run directory: its latest checkpoint */
    char st_path[4096], packed[4200];
    snprintf(st_path, sizeof st_path, "%s/" CLI_MODEL_FILE, arg);
    snprintf(packed, sizeof packed, "%s.zst", st_path);
    if (stat(st_path, &sb) == 0) {
      *model = dg_strdup(st_path);
    } else if (stat(packed, &sb) == 0) {
      *model = dg_strdup(packed);
    } else {
      char *sp;
      int64_t step;
      if (!train_run_latest(arg, model, &sp, &step, st)) return false;
      free(sp);
    }
    dir = dg_strdup(arg);
  } else {
    *model = dg_strdup(arg);
    dir = dg_strdup(arg);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else strcpy(dir, ".");
  }
  if (tokp) {
    *tok = dg_strdup(tokp);
  } else {
    size_t n = strlen(dir) + 32;
    bool slash = dir[0] && dir[strlen(dir) - 1] == '/';
    *tok = dg_malloc(n);
    snprintf(*tok, n, "%s%stokenizer.bin", dir, slash ? "" : "/");
  }
  free(dir);
  return true;
}

static bool ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), k = strlen(tail);
  return n >= k && strcmp(s + n - k, tail) == 0;
}

bool cli_is_safetensors(const char *path) {
  return ends_with(path, ".safetensors") || ends_with(path, ".safetensors.zst");
}

bool cli_model_load(const char *flag, const char *arg, const char *tokp, nn_model *m,
                    tok_tokenizer **tok, char **model_path, dg_status *st) {
  char *tok_path = NULL;
  *tok = NULL;
  *model_path = NULL;
  if (!cli_model_paths(flag, arg, tokp, model_path, &tok_path, st)) return false;
  bool ok = false;
  if (!(*tok = tok_load(tok_path, st))) goto done;
  if (cli_is_safetensors(*model_path)) {
    nn_config cfg;
    if (!nn_safetensors_read_config(*model_path, &cfg, st) || !nn_model_init(m, &cfg, false, st))
      goto done;
    if (!nn_safetensors_import(m, *model_path, st)) {
      nn_model_free(m);
      goto done;
    }
  } else if (!nn_checkpoint_load(m, *model_path, false, st)) {
    goto done;
  }
  if (m->cfg.vocab_size != tok_vocab_size(*tok)) {
    dg_fail(st, DG_ERR_INVALID, "%s has a vocabulary of %d, %s one of %d: not the model's tokenizer",
            *model_path, m->cfg.vocab_size, tok_path, tok_vocab_size(*tok));
    nn_model_free(m);
    goto done;
  }
  ok = true;
done:
  if (!ok) {
    tok_free(*tok);
    *tok = NULL;
  }
  free(tok_path);
  return ok;
}

char *cli_read_text(const char *path, dg_status *st) {
  size_t n;
  char *text = dg_read_file(path, &n, st);
  if (!text) dg_status_prefix(st, "%s", path);
  return text;
}

/* A tokenizer and its mask for one writer at a time. */
struct cli_writer_slot {
  tok_tokenizer *tok;
  tsel_mask *mask;
  bool busy;
  bool model_own; /* the model's tok and mask: freed with the model */
  cli_writer_slot *next;
};

bool cli_model_open(cli_model *cm, const char *flag, const char *arg, const char *tokp,
                    bool constrained, dg_status *st) {
  memset(cm, 0, sizeof *cm);
  char *mp = NULL;
  if (!cli_model_paths(flag, arg, tokp, &mp, &cm->tok_path, st)) return false;
  free(mp);
  if (!cli_model_load(flag, arg, tokp, &cm->m, &cm->tok, &cm->path, st)) {
    free(cm->tok_path);
    cm->tok_path = NULL;
    return false;
  }
  cm->loaded = true;
  if (!train_model_plan_first(cm->path, &cm->plan_first, st)) {
    cli_model_close(cm);
    return false;
  }
  pthread_mutex_t *lock = dg_malloc(sizeof *lock);
  pthread_mutex_init(lock, NULL);
  cm->pool_lock = lock;
  if (constrained && !(cm->mask = tsel_mask_new(cm->tok, st))) {
    cli_model_close(cm);
    return false;
  }
  cm->slots = dg_calloc(1, sizeof *cm->slots);
  *cm->slots = (cli_writer_slot){cm->tok, cm->mask, false, true, NULL};
  return true;
}

bool cli_model_use_gpu(cli_model *cm, dg_status *st) {
  if (cm->gpu) return true;
  if (!cm->mask) return dg_fail(st, DG_ERR_USAGE, "--write cuda: the GPU writes constrained graphs only");
  /* a model that only scores: its batch shape is the smallest (the
   * writers' KV caches are their own) */
  return train_cuda_init_frozen(&cm->gpu, &cm->m, 1, 16, st);
}

bool cli_write_device(const char *arg, bool have_gpu, bool *gpu, dg_status *st) {
  *gpu = have_gpu;
  if (!arg) return true;
  if (strcmp(arg, "cpu") == 0 || strcmp(arg, "cuda") == 0) {
    *gpu = strcmp(arg, "cuda") == 0;
    return true;
  }
  return dg_fail(st, DG_ERR_USAGE, "--write %s: cpu or cuda", arg);
}

void cli_model_close(cli_model *cm) {
  train_cuda_free(cm->gpu);
  tsel_mask_free(cm->mask);
  for (cli_writer_slot *s = cm->slots, *next; s; s = next) {
    next = s->next;
    if (!s->model_own) {
      tsel_mask_free(s->mask);
      tok_free(s->tok);
    }
    free(s);
  }
  if (cm->pool_lock) {
    pthread_mutex_destroy(cm->pool_lock);
    free(cm->pool_lock);
  }
  if (cm->loaded) {
    nn_model_free(&cm->m);
    tok_free(cm->tok);
  }
  dg_status st;
  if (!eval_guard_log_close(cm->guard_log, &st)) fprintf(stderr, "dragon: %s\n", st.msg);
  free(cm->path);
  free(cm->tok_path);
  memset(cm, 0, sizeof *cm);
}

/* A tokenizer and mask no other writer holds: the model's own first, then
 * the pool's, made as needed (NULL with errs told, when that fails). */
static cli_writer_slot *take_slot(cli_model *cm, dg_str *errs) {
  pthread_mutex_lock(cm->pool_lock);
  cli_writer_slot *got = NULL;
  for (cli_writer_slot *s = cm->slots; s && !got; s = s->next)
    if (!s->busy) got = s;
  if (got) got->busy = true;
  pthread_mutex_unlock(cm->pool_lock);
  if (got) return got;
  dg_status st;
  cli_writer_slot *s = dg_calloc(1, sizeof *s);
  if (!(s->tok = tok_load(cm->tok_path, &st)) ||
      (cm->mask && !(s->mask = tsel_mask_new(s->tok, &st)))) {
    tok_free(s->tok);
    free(s);
    dg_str_printf(errs, "  another writer's tokenizer: %s\n", st.msg);
    return NULL;
  }
  s->busy = true;
  pthread_mutex_lock(cm->pool_lock);
  s->next = cm->slots->next; /* after the model's own */
  cm->slots->next = s;
  pthread_mutex_unlock(cm->pool_lock);
  return s;
}

static void give_slot(cli_model *cm, cli_writer_slot *s) {
  pthread_mutex_lock(cm->pool_lock);
  s->busy = false;
  pthread_mutex_unlock(cm->pool_lock);
}

/* The jobs on the GPU: the writers on up to one thread a core, each with a
 * slot of its own (fewer where no more could be made). */
static bool write_on_gpu(cli_model *cm, const train_decode_job *jobs, int n, const train_decode_opts *o, char **texts,
                         train_decode_stats *ds, dg_status *es, double *lock_wait_s, dg_status *st) {
  int want = rt_cpu_count() < n ? rt_cpu_count() : n, threads = 0;
  cli_writer_slot **slots = dg_calloc((size_t)want, sizeof *slots);
  tok_tokenizer **toks = dg_calloc((size_t)want, sizeof *toks);
  tsel_mask **masks = dg_calloc((size_t)want, sizeof *masks);
  dg_str errs;
  dg_str_init(&errs);
  while (threads < want && (slots[threads] = take_slot(cm, &errs))) {
    toks[threads] = slots[threads]->tok;
    masks[threads] = slots[threads]->mask;
    threads++;
  }
  train_decode_gpu_stats gs = {0};
  bool ok = threads > 0 ? train_decode_jobs_cuda(cm->gpu, toks, masks, threads, jobs, n, TSEL_TARGET_CUDA, o, texts,
                                                 NULL, ds, es, &gs, st)
                        : dg_fail(st, DG_ERR_RUNTIME, "%.400s", errs.s ? errs.s : "no tokenizer");
  if (lock_wait_s) *lock_wait_s += gs.lock_wait_s;
  for (int t = 0; t < threads; t++) give_slot(cm, slots[t]);
  dg_str_free(&errs);
  free(slots);
  free(toks);
  free(masks);
  return ok;
}

/* A group of cli_model_write's samples (i, i + groups, ...), written in
 * step on whichever thread runs it. */
typedef struct {
  cli_model *cm;
  const dg_func *f;
  const char *spec, *kernel_text, *prior;
  const train_decode_opts *o;
  uint64_t seed;
  int k, groups;
  char **texts;
  train_decode_stats *ds;
  char (*why)[300]; /* a failed sample's reason */
} write_job;

static void write_group(void *p, int g) {
  write_job *j = p;
  int n = 0;
  int *idx = dg_malloc(sizeof(int) * (size_t)j->k);
  for (int i = g; i < j->k; i += j->groups) idx[n++] = i;
  dg_str errs;
  dg_str_init(&errs);
  cli_writer_slot *slot = take_slot(j->cm, &errs);
  tok_ids ids = {0};
  dg_status st;
  const char *fail = NULL;
  char msg[300];
  if (!slot) {
    snprintf(msg, sizeof msg, "%.290s", errs.s ? errs.s : "no tokenizer");
    fail = msg;
  } else if (!train_prompt_encode(slot->tok, j->kernel_text, j->prior, &ids, &st)) {
    snprintf(msg, sizeof msg, "the prompt: %.260s", st.msg);
    fail = msg;
  } else {
    uint64_t *seeds = dg_malloc(sizeof *seeds * (size_t)n);
    char **texts = dg_calloc((size_t)n, sizeof *texts);
    train_decode_stats *ds = dg_calloc((size_t)n, sizeof *ds);
    dg_status *es = dg_calloc((size_t)n, sizeof *es);
    for (int r = 0; r < n; r++) seeds[r] = j->seed + (uint64_t)idx[r];
    if (!train_decode_graphs(&j->cm->m, slot->tok, slot->mask, ids.data, (int)ids.len, j->f, j->spec,
                             TSEL_TARGET_CUDA, j->o, n, seeds, texts, NULL, ds, es, &st)) {
      snprintf(msg, sizeof msg, "decoding failed: %.260s", st.msg);
      fail = msg;
    }
    for (int r = 0; r < n && !fail; r++) {
      j->texts[idx[r]] = texts[r];
      j->ds[idx[r]] = ds[r];
      if (!texts[r]) snprintf(j->why[idx[r]], sizeof j->why[idx[r]], "decoding failed: %.260s", es[r].msg);
    }
    free(seeds);
    free(texts);
    free(ds);
    free(es);
  }
  if (fail)
    for (int r = 0; r < n; r++) snprintf(j->why[idx[r]], sizeof j->why[idx[r]], "%s", fail);
  tok_ids_free(&ids);
  if (slot) give_slot(j->cm, slot);
  dg_str_free(&errs);
  free(idx);
}

/* One graph's decoding into the writer's totals. */
static void add_decode_stats(cli_write_stats *ws, const train_decode_stats *d) {
  ws->tokens += d->n_sampled + d->n_forced;
  ws->backtracks += d->n_backtracks;
  ws->narrowed += d->n_narrowed;
  ws->gave_up += d->guard_gave_up;
  ws->restarts += d->n_restarts;
  ws->guard_secs += d->guard_secs;
}

double cli_model_write(cli_model *cm, const dg_func *f, const char *spec, const char *kernel_text,
                       const char *prior, int k, const train_decode_opts *o, uint64_t seed,
                       char **texts, cli_write_stats *ws, dg_str *errs) {
  double t0 = dg_now();
  if (k <= 0) return 0;
  train_decode_opts go = *o;
  go.plan_first = cm->plan_first;
  eval_guard guard = {f, spec, cm->guard_log};
  if (cm->mask && !cm->no_guard && !o->unconstrained) {
    go.guard = eval_guard_line;
    go.guard_ctx = &guard;
  }
  /* the samples in groups, a core each, a group's samples in step (with
   * more samples than cores, a pass of the model serves several): sample
   * i is written with seed + i, so the texts depend on neither */
  train_decode_stats *ds = dg_calloc((size_t)k, sizeof *ds);
  char(*why)[300] = dg_calloc((size_t)k, sizeof *why);
  for (int i = 0; i < k; i++) texts[i] = NULL;
  if (cm->gpu && cm->mask && !o->unconstrained) {
    /* on the GPU: the k samples rows of one cache */
    dg_str perr;
    dg_str_init(&perr);
    cli_writer_slot *slot = take_slot(cm, &perr);
    tok_ids ids = {0};
    dg_status st;
    bool ok = slot && train_prompt_encode(slot->tok, kernel_text, prior, &ids, &st);
    if (slot) give_slot(cm, slot);
    if (!slot) snprintf(why[0], sizeof why[0], "%.290s", perr.s ? perr.s : "no tokenizer");
    else if (!ok) snprintf(why[0], sizeof why[0], "the prompt: %.260s", st.msg);
    if (ok) {
      train_decode_job *jobs = dg_calloc((size_t)k, sizeof *jobs);
      dg_status *es = dg_calloc((size_t)k, sizeof *es);
      for (int i = 0; i < k; i++)
        jobs[i] = (train_decode_job){ids.data, (int)ids.len, f, spec, seed + (uint64_t)i, NULL};
      if (!write_on_gpu(cm, jobs, k, &go, texts, ds, es, ws ? &ws->lock_wait_s : NULL, &st))
        snprintf(why[0], sizeof why[0], "decoding failed: %.260s", st.msg);
      for (int i = 0; i < k; i++)
        if (!texts[i]) snprintf(why[i], sizeof why[i], "decoding failed: %.260s", es[i].msg[0] ? es[i].msg : st.msg);
      free(jobs);
      free(es);
    } else {
      for (int i = 1; i < k; i++) memcpy(why[i], why[0], sizeof why[i]);
    }
    tok_ids_free(&ids);
    dg_str_free(&perr);
  } else {
    int threads = rt_cpu_count(), groups = threads < k ? threads : k;
    write_job j = {cm, f, spec, kernel_text, prior, &go, seed, k, groups, texts, ds, why};
    rt_tasks *t = rt_tasks_start(groups, groups, write_group, &j);
    while (rt_tasks_next(t, true) >= 0) {
    }
    rt_tasks_free(t);
  }
  for (int i = 0; i < k; i++) {
    if (ws) add_decode_stats(ws, &ds[i]);
    if (!texts[i]) dg_str_printf(errs, "  sample %d: %s\n", i + 1, why[i]);
  }
  free(ds);
  free(why);
  return dg_now() - t0;
}

void cli_model_write_each(cli_model *cm, const dg_func *const *f, const char *const *specs,
                          const char *const *priors, const uint64_t *seeds, int n, const train_decode_opts *o,
                          char **texts, int64_t *tokens, cli_write_stats *ws, dg_status *why) {
  for (int i = 0; i < n; i++) {
    texts[i] = NULL;
    if (tokens) tokens[i] = 0;
    dg_status_ok(&why[i]);
  }
  if (n <= 0) return;
  dg_str errs;
  dg_str_init(&errs);
  cli_writer_slot *slot = take_slot(cm, &errs);
  if (!slot) {
    for (int i = 0; i < n; i++) dg_fail(&why[i], DG_ERR_RUNTIME, "%.400s", errs.s ? errs.s : "no tokenizer");
    dg_str_free(&errs);
    return;
  }
  train_decode_opts go = *o;
  go.plan_first = cm->plan_first;
  bool guarded = cm->mask && !cm->no_guard && !o->unconstrained;
  eval_guard *guards = dg_calloc((size_t)n, sizeof *guards);
  tok_ids *ids = dg_calloc((size_t)n, sizeof *ids);
  train_decode_job *jobs = dg_calloc((size_t)n, sizeof *jobs);
  train_decode_stats *ds = dg_calloc((size_t)n, sizeof *ds);
  int m = 0;
  int *at = dg_malloc(sizeof(int) * (size_t)n);
  if (guarded) go.guard = eval_guard_line;
  for (int i = 0; i < n; i++) {
    char *kernel_text = ir_print(f[i]);
    dg_status st;
    if (!train_prompt_encode(slot->tok, kernel_text, priors ? priors[i] : NULL, &ids[i], &st)) {
      dg_fail(&why[i], DG_ERR_INVALID, "the prompt: %.400s", st.msg);
    } else {
      guards[i] = (eval_guard){f[i], specs[i], cm->guard_log};
      jobs[m] = (train_decode_job){ids[i].data, (int)ids[i].len, f[i], specs[i], seeds[i],
                                   guarded ? &guards[i] : NULL};
      at[m++] = i;
    }
    free(kernel_text);
  }
  char **got = dg_calloc((size_t)(m ? m : 1), sizeof *got);
  dg_status *es = dg_calloc((size_t)(m ? m : 1), sizeof *es);
  dg_status st;
  bool on_gpu = cm->gpu && cm->mask && !o->unconstrained;
  if (on_gpu) { /* the GPU's writers take slots of their own */
    give_slot(cm, slot);
    slot = NULL;
  }
  bool wrote = on_gpu ? write_on_gpu(cm, jobs, m, &go, got, ds, es, ws ? &ws->lock_wait_s : NULL, &st)
                      : train_decode_jobs(&cm->m, slot->tok, slot->mask, jobs, m, TSEL_TARGET_CUDA, &go, got, NULL,
                                          ds, es, &st);
  if (!wrote) {
    for (int r = 0; r < m; r++) dg_fail(&why[at[r]], DG_ERR_RUNTIME, "decoding failed: %.400s", st.msg);
  } else {
    for (int r = 0; r < m; r++) {
      texts[at[r]] = got[r];
      if (!got[r]) dg_fail(&why[at[r]], DG_ERR_RUNTIME, "decoding failed: %.400s", es[r].msg);
      if (tokens) tokens[at[r]] = ds[r].n_sampled + ds[r].n_forced;
      if (ws) add_decode_stats(ws, &ds[r]);
    }
  }
  if (slot) give_slot(cm, slot);
  for (int i = 0; i < n; i++) tok_ids_free(&ids[i]);
  free(got);
  free(es);
  free(at);
  free(ds);
  free(jobs);
  free(ids);
  free(guards);
  dg_str_free(&errs);
}

const char *cli_model_arg(const char *arg) {
  if (arg) return arg;
  const char *e = getenv("DRAGON_MODEL");
  return e && *e ? e : CLI_DEFAULT_MODEL;
}

bool cli_gpu_open(const char *target, int threads, search_cuda_measure *gm, bool *have,
                  dg_str *notes, dg_status *st) {
  *have = false;
  dg_status_ok(st);
  bool want = target ? strcmp(target, "cuda") == 0 : rt_cuda_available(st);
  dg_status_ok(st);
  if (!want) return true;
  gm->threads = threads;
  /* a candidate NVRTC takes longer than this on is stopped and fails its
   * build (an unrolled giant would otherwise hold the whole batch) */
  if (gm->compile_limit_s <= 0) gm->compile_limit_s = CLI_COMPILE_LIMIT_S;
  if (search_cuda_measure_init(gm, st)) {
    *have = true;
    return true;
  }
  if (target) {
    dg_status_prefix(st, "--target cuda");
    return false;
  }
  dg_str_printf(notes, "  no GPU measurement (%s): checked in the C emulation, not timed\n", st->msg);
  dg_status_ok(st);
  return true;
}

bool cli_out_dir(const char *dir, dg_status *st) {
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *p = buf + 1; *p; p++) { /* its parents first, as mkdir -p */
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
      return dg_fail(st, DG_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
    *p = '/';
  }
  if (mkdir(buf, 0777) != 0 && errno != EEXIST)
    return dg_fail(st, DG_ERR_IO, "%s: cannot create: %s", buf, strerror(errno));
  return true;
}

bool cli_write_in(const char *dir, const char *name, const char *text, dg_status *st) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return dg_write_file_atomic(path, text, strlen(text), st);
}
