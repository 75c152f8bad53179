/* verify.c: a lowered program against the GPU's limits (TVM's
 * VerifyGPUCode and MetaSchedule's thread-extent check), so that a kernel
 * the GPU would refuse is rejected before it is built, with the reason.
 *
 * Checked per launch: threads per block and per dimension, grid dimensions,
 * static and dynamic shared memory (after software pipelining: a
 * multi-buffered stage counts every version, as TVM counts the pipelined
 * allocation), local memory per thread, the widest vector access, and the
 * thread-extent bounds that MetaSchedule annotates on blocks. vthread
 * extents are not limited in sm_90's table: TVM checks them after
 * InjectVirtualThread has expanded every one, so it refuses none (a table
 * may still set max_vthread). The quantities checked do not change with
 * vthread expansion (compaction already gave each virtual thread its local
 * copies), so checking them before it, as the lowering does, is checking
 * them after it. Registers are not counted (the
 * compiler decides them), except for tensor-core fragments: a warp's
 * fragment arrays are register arrays of its lanes, and arrays past the
 * register file (255 registers a thread) spill to local memory, which
 * makes a slow kernel that also takes minutes to compile (its unrolled
 * body holds hundreds of fragment operations).
 */
#include <inttypes.h>
#include <stdint.h>

#include "lower/lower_impl.h"

const lw_limits lower_limits_sm90 = {
    .max_threads_per_block = 1024,
    .max_thread_dim = {1024, 1024, 64},
    .max_grid_dim = {2147483647, 65535, 65535},
    .max_shared_bytes = 48 * 1024,
    .max_shared_dyn_bytes = 227 * 1024,
    .max_local_bytes = 512 * 1024,
    .max_fragment_bytes = 255 * 4,
    .max_vthread = INT64_MAX,
    .max_vector_bytes = 16,
    .warp_size = 32,
    .async_copy = true,
};

int64_t lower_kernel_shared_bytes(const lw_kernel *k, bool dynamic) {
  int64_t total = 0;
  for (int i = 0; i < k->n_shared; i++) {
    const dg_buffer *b = k->shared[i];
    if ((b->scope == DG_SCOPE_SHARED_DYN) != dynamic) continue;
    /* each allocation aligned as the emitter declares them: 16 bytes for
     * static arrays, 128 for the parts of dynamic shared memory (tensor-core
     * loads need 32) */
    int64_t align = dynamic ? 128 : 16;
    int64_t bytes = ir_buffer_numel(b) * dg_dtype_bytes(b->dtype);
    total += (bytes + align - 1) / align * align;
  }
  return total;
}

static const char *const dim_name[3] = {"x", "y", "z"};

bool lower_verify(const lw_program *p, const lw_limits *lim, dg_status *st) {
  for (int i = 0; i < p->n_kernels; i++)
    if (!lower_verify_kernel(&p->kernels[i], lim, st)) return false;
  return true;
}

bool lower_verify_kernel(const lw_kernel *k, const lw_limits *lim, dg_status *st) {
  if (!lim) lim = &lower_limits_sm90;
#define VFAIL(...)                                                          \
  do {                                                                      \
    dg_fail(st, DG_ERR_INVALID, __VA_ARGS__);                               \
    dg_status_prefix(st, "lower: kernel %s", k->name);                      \
    return false;                                                           \
  } while (0)
  int64_t threads = k->block[0] * k->block[1] * k->block[2];
  if (threads > lim->max_threads_per_block)
    VFAIL("%" PRId64 " threads per block (limit %" PRId64 ")", threads, lim->max_threads_per_block);
  for (int d = 0; d < 3; d++) {
    if (k->block[d] > lim->max_thread_dim[d])
      VFAIL("threadIdx.%s extent %" PRId64 " (limit %" PRId64 ")", dim_name[d], k->block[d],
            lim->max_thread_dim[d]);
    if (k->grid[d] > lim->max_grid_dim[d])
      VFAIL("blockIdx.%s extent %" PRId64 " (limit %" PRId64 ")", dim_name[d], k->grid[d],
            lim->max_grid_dim[d]);
  }
  int64_t sh = lower_kernel_shared_bytes(k, false);
  if (sh > lim->max_shared_bytes)
    VFAIL("%" PRId64 " bytes of shared memory (limit %" PRId64 ")", sh, lim->max_shared_bytes);
  int64_t dyn = lower_kernel_shared_bytes(k, true);
  if (dyn > lim->max_shared_dyn_bytes)
    VFAIL("%" PRId64 " bytes of dynamic shared memory (limit %" PRId64 ")", dyn,
          lim->max_shared_dyn_bytes);
  int64_t local = 0, frag = 0;
  for (int j = 0; j < k->n_local; j++) {
    const dg_buffer *b = k->local[j];
    int64_t bytes = ir_buffer_numel(b) * dg_dtype_bytes(b->dtype);
    /* a fragment is spread over the lanes of its warp */
    if (lower_scope_is_fragment(b->scope)) {
      bytes = (bytes + lim->warp_size - 1) / lim->warp_size;
      frag += bytes;
    }
    local += bytes;
  }
  if (local > lim->max_local_bytes)
    VFAIL("%" PRId64 " bytes of local memory per thread (limit %" PRId64 ")", local,
          lim->max_local_bytes);
  if (frag > lim->max_fragment_bytes)
    VFAIL("%" PRId64 " bytes of tensor-core fragments per thread (limit %" PRId64
          ", the register file)",
          frag, lim->max_fragment_bytes);
  if (k->max_vthread > lim->max_vthread)
    VFAIL("a vthread loop of extent %" PRId64 " (limit %" PRId64 ")", k->max_vthread,
          lim->max_vthread);
  if (k->max_vector_bytes > lim->max_vector_bytes)
    VFAIL("vectorized loop %s accesses %" PRId64 " bytes at once (limit %" PRId64 ")",
          k->vector_loop ? k->vector_loop : "?", k->max_vector_bytes, lim->max_vector_bytes);
  for (int j = 0; j < k->n_checks; j++) {
    const lw_thread_check *c = &k->checks[j];
    if ((c->low >= 0 && c->threads < c->low) || (c->high >= 0 && c->threads > c->high))
      VFAIL("block %s runs on %" PRId64 " threads, outside its thread extent bounds [%" PRId64
            ", %" PRId64 "]",
            c->block, c->threads, c->low, c->high);
  }
#undef VFAIL
  return true;
}
