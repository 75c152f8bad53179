/* fuzz_cost_model.c: libFuzzer target for the saved cost model's data file
 * (search_cost_model_load; src/search/cost_model.c), the file a labelling
 * run starts from (`dragon data label --cost-model`).
 *
 * An input that begins with zstd's frame magic is data.bin as it is (the
 * stream checks: truncation, corruption, checksums); anything else is
 * data.bin's raw layout (magic, version, feature count, groups of
 * candidates), which the loader also reads, so the fuzzer works on the
 * fields themselves. No model.json is written: the XGBoost model file is
 * XGBoost's to parse. Nothing may crash or leak; a refused file carries a
 * message and leaves the model untrained and empty; an accepted one saves
 * and loads back to the same number of samples. tests/test_reliability.c
 * replays tests/fuzz/cost_model/.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dragon/search.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[512], again[512], file[600]; /* under $TMPDIR (or /tmp), per process */
  if (!dir[0]) {
    const char *t = getenv("TMPDIR");
    t = t && *t ? t : "/tmp";
    snprintf(dir, sizeof dir, "%s/dragon-fuzz-cm-%ld", t, (long)getpid());
    snprintf(again, sizeof again, "%s/dragon-fuzz-cm-%ld-again", t, (long)getpid());
    snprintf(file, sizeof file, "%s/data.bin", dir);
  }
  mkdir(dir, 0755);
  dg_status st;
  DG_ASSERT(dg_write_file_atomic(file, data, size, &st));
  search_cost_model *m = search_cost_model_new(NULL, 1);
  if (!search_cost_model_load(m, dir, &st)) {
    DG_ASSERT(st.code != DG_OK && st.msg[0] != 0);
    DG_ASSERT(search_cost_model_samples(m) == 0 && !search_cost_model_trained(m));
  } else {
    /* no model.json: the data alone, untrained until the next retrain */
    DG_ASSERT(!search_cost_model_trained(m));
    int n = search_cost_model_samples(m);
    DG_ASSERT(n >= 0);
    DG_ASSERT(search_cost_model_save(m, again, &st));
    search_cost_model *m2 = search_cost_model_new(NULL, 1);
    DG_ASSERT(search_cost_model_load(m2, again, &st));
    DG_ASSERT(search_cost_model_samples(m2) == n);
    search_cost_model_free(m2);
    char p[600];
    snprintf(p, sizeof p, "%s/data.bin", again);
    unlink(p);
    rmdir(again);
  }
  search_cost_model_free(m);
  unlink(file);
  rmdir(dir);
  return 0;
}
