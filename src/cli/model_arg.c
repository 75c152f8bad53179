/* model_arg.c: what a model argument names (a run directory, whose latest
 * checkpoint is taken, or a model file), its tokenizer (tokenizer.bin
 * beside it unless named), loading both with the check that they belong
 * together, and reading a text file argument; the model as a writer of
 * graphs under the mask (cli_model). Used by every command that runs the
 * model (sample-model, optimize, eval); and the GPU that judges their
 * graphs (--target). */
#include <errno.h>
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

bool cli_model_open(cli_model *cm, const char *flag, const char *arg, const char *tokp,
                    bool constrained, dg_status *st) {
  memset(cm, 0, sizeof *cm);
  if (!cli_model_load(flag, arg, tokp, &cm->m, &cm->tok, &cm->path, st)) return false;
  cm->loaded = true;
  if (constrained && !(cm->mask = tsel_mask_new(cm->tok, st))) {
    cli_model_close(cm);
    return false;
  }
  return true;
}

void cli_model_close(cli_model *cm) {
  tsel_mask_free(cm->mask);
  if (cm->loaded) {
    nn_model_free(&cm->m);
    tok_free(cm->tok);
  }
  free(cm->path);
  memset(cm, 0, sizeof *cm);
}

double cli_model_write(cli_model *cm, const dg_func *f, const char *spec, const char *kernel_text,
                       const char *prior, int k, const train_decode_opts *o, uint64_t seed,
                       char **texts, cli_write_stats *ws, dg_str *errs) {
  double t0 = dg_now();
  train_decode_opts go = *o;
  eval_guard guard = {f, spec};
  if (cm->mask && !cm->no_guard && !o->unconstrained) {
    go.guard = eval_guard_line;
    go.guard_ctx = &guard;
  }
  tok_ids ids = {0};
  dg_status st;
  if (!train_prompt_encode(cm->tok, kernel_text, prior, &ids, &st)) {
    dg_str_printf(errs, "  %s: the prompt: %s\n", spec, st.msg);
    return dg_now() - t0;
  }
  for (int i = 0; i < k; i++) {
    train_decode_stats ds;
    memset(&ds, 0, sizeof ds);
    texts[i] = train_decode_graph(&cm->m, cm->tok, cm->mask, ids.data, (int)ids.len, f, spec,
                                  TSEL_TARGET_CUDA, &go, seed + (uint64_t)i, &ds, &st);
    if (ws) {
      ws->tokens += ds.n_sampled + ds.n_forced;
      ws->backtracks += ds.n_backtracks;
      ws->gave_up += ds.guard_gave_up;
      ws->guard_secs += ds.guard_secs;
    }
    if (!texts[i]) dg_str_printf(errs, "  sample %d: decoding failed: %s\n", i + 1, st.msg);
  }
  tok_ids_free(&ids);
  return dg_now() - t0;
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
