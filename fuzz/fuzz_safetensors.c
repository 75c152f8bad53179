/* fuzz_safetensors.c: libFuzzer target for the safetensors reader
 * (nn_safetensors_read_config, nn_safetensors_import; src/nn/safetensors.c).
 *
 * An input is the file. It is imported into a model of a small fixed
 * config (the tensor table, dtypes, shapes, data offsets and coverage),
 * and, where its __metadata__ names a config small enough for the fuzzer's
 * memory, into a model of that config too. Nothing may crash or leak; a
 * refusal carries a message that starts with the path and leaves the
 * model as it was. tests/test_reliability.c replays tests/fuzz/safetensors/.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dragon/nn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const nn_config st_micro = {8, 4, 1, 1, 1, 4, 4, 8, 10000.0f, 1e-5f};

static void st_import(const nn_config *cfg, const char *path) {
  nn_model m;
  dg_status st;
  DG_ASSERT(nn_model_init(&m, cfg, false, &st));
  for (size_t i = 0; i < m.num_params; i++) m.params_mem[i] = 0.25f;
  if (!nn_safetensors_import(&m, path, &st)) {
    DG_ASSERT(st.code != DG_OK && strncmp(st.msg, path, strlen(path)) == 0);
    for (size_t i = 0; i < m.num_params; i++) DG_ASSERT(m.params_mem[i] == 0.25f);
  }
  nn_model_free(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512]; /* under $TMPDIR (or /tmp), one per process */
  if (!path[0]) {
    const char *t = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/dragon-fuzz-st-%ld", t && *t ? t : "/tmp", (long)getpid());
  }
  FILE *f = fopen(path, "wb");
  DG_ASSERT(f && fwrite(data, 1, size, f) == size && fclose(f) == 0);
  st_import(&st_micro, path);
  nn_config cfg;
  dg_status st;
  if (!nn_safetensors_read_config(path, &cfg, &st)) {
    DG_ASSERT(st.code != DG_OK && strncmp(st.msg, path, strlen(path)) == 0);
    return 0;
  }
  DG_ASSERT(nn_config_validate(&cfg, &st));
  if (nn_config_param_count(&cfg) <= (1 << 16) && (int64_t)cfg.max_seq_len * cfg.head_dim <= (1 << 16))
    st_import(&cfg, path);
  return 0;
}
