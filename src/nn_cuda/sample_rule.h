/* sample_rule.h: the sampling rule of nn_sample_token (src/nn/sample.c)
 * written once for the host and the device, so the CUDA sampler (decode.cu)
 * runs the same arithmetic as the C reference and a CPU test can check it
 * against nn_sample_token without a GPU.
 *
 * The C reference sorts (z = logit / temperature, id) most likely first,
 * the lower id first on ties. Here every (z, id) becomes one 64-bit key
 * whose unsigned order is that order: the high word is z's bits made
 * monotonic (-0 folded onto +0, which compare equal), the low word is
 * 0xffffffff - id, so a descending sort of the keys (a radix sort on the
 * GPU) gives exactly the reference's ranking without depending on the
 * sort's stability. nc_sample_pick then keeps top-k, cuts to top-p and
 * draws with u in [0, 1), summing in double in ranked order as the
 * reference does. NaN logits are not handled (nor are they in the
 * reference).
 *
 * Plain C11 and CUDA C++ alike: NC_HD marks the functions __host__
 * __device__ under nvcc.
 */
#ifndef DRAGON_NN_CUDA_SAMPLE_RULE_H
#define DRAGON_NN_CUDA_SAMPLE_RULE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define NC_HD __host__ __device__
#else
#define NC_HD
#endif

/* The ranking key of (z, id): a larger key ranks first. */
NC_HD static inline uint64_t nc_sample_key(float z, int32_t id) {
  uint32_t u;
  memcpy(&u, &z, sizeof u);
  if (u == 0x80000000u) u = 0; /* -0 ranks as +0 */
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ((uint64_t)u << 32) | (uint64_t)(0xffffffffu - (uint32_t)id);
}

NC_HD static inline float nc_sample_key_z(uint64_t key) {
  uint32_t u = (uint32_t)(key >> 32);
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  float z;
  memcpy(&z, &u, sizeof z);
  return z;
}

NC_HD static inline int32_t nc_sample_key_id(uint64_t key) {
  return (int32_t)(0xffffffffu - (uint32_t)key);
}

/* Tokens the rule can keep at most: top_k when it cuts, else all V. */
NC_HD static inline int nc_sample_kept_max(int V, int top_k) {
  return top_k > 0 && top_k < V ? top_k : V;
}

/* The token nn_sample_token draws (temperature > 0) with uniform u, from
 * the V keys of one row sorted descending. e[j] = exp(z_j - z_0) in double
 * for j < nc_sample_kept_max (computed here when e is NULL). */
NC_HD static inline int32_t nc_sample_pick(const uint64_t *keys, const double *e, int V,
                                           int top_k, float top_p, double u) {
  double z0 = (double)nc_sample_key_z(keys[0]);
#define NC_E(j) (e ? e[j] : exp((double)nc_sample_key_z(keys[j]) - z0))
  int kept = nc_sample_kept_max(V, top_k);
  double sum = 0;
  for (int j = 0; j < kept; j++) sum += NC_E(j);
  if (top_p > 0 && top_p < 1) {
    double cum = 0;
    int j = 0;
    while (j < kept) {
      cum += NC_E(j) / sum;
      j++;
      if (cum >= top_p) break;
    }
    kept = j;
    sum = 0;
    for (j = 0; j < kept; j++) sum += NC_E(j);
  }
  /* the reference stores each probability as a float, then sums them */
  double cum = 0;
  int32_t tok = nc_sample_key_id(keys[kept - 1]);
  for (int j = 0; j < kept; j++) {
    cum += (double)(float)(NC_E(j) / sum);
    if (u < cum) {
      tok = nc_sample_key_id(keys[j]);
      break;
    }
  }
#undef NC_E
  return tok;
}

#endif
