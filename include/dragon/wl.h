/* wl.h: workload families, spec strings and the workload generator.
 *
 * A workload is a family and its parameters, written as a canonical spec
 * string `family:key=val,...` (keys in the family's fixed order, every key
 * present, defaults written out), so one workload has one spec string.
 * MetaSchedule's test workloads have aliases: `GMM/0` ... `TBG/3` (`GMM`
 * alone means `GMM/0`). A family is a function from parameters to a kernel
 * (dg_func) whose block and buffer names follow TVM's te workloads where one
 * exists, so traces written by TVM for the same kernel replay here.
 * dtype=f16: inputs are f16 and reductions accumulate in f32 (contractions
 * write f32, normalisations cast their output back to f16). The families,
 * keys, aliases and the generator's mix are documented in docs/workloads.md.
 */
#ifndef DRAGON_WL_H
#define DRAGON_WL_H

#include "dragon/ir.h"

/* Every workload's tensors together fit in this many bytes. */
#define WL_MAX_BYTES (256ll << 20)

/* Canonical spec of a spec or alias (caller frees). Errors name the key or
 * the position: "gemm:m=0: m must be in [1, 65536]". */
char *wl_canonical(const char *spec, dg_status *st);

/* Builds the kernel of a spec or alias. The kernel is named "main". */
dg_func *wl_build(const char *spec, dg_status *st);

/* Families, in a fixed order. */
int wl_family_count(void);
const char *wl_family_name(int i);
const char *wl_family_about(int i);     /* one line */
const char *wl_family_example(int i);   /* a canonical spec of this family */

/* The MetaSchedule aliases: "C1D" .. "TBG", each with configs 0..3. */
int wl_alias_count(void);
const char *wl_alias_name(int i);

/* Generates `count` distinct canonical specs for a seed, deterministic, in
 * a fixed order; family NULL means the documented mix of all families.
 * Calls emit once per spec. Fails if the family cannot yield that many. */
bool wl_generate(uint64_t seed, int64_t count, const char *family,
                 void (*emit)(const char *spec, void *ctx), void *ctx,
                 dg_status *st);

#endif
