/* attention_wgmma.cu: the causal grouped-query attention of attention.cu
 * (same arguments, same results to rounding) on the sm_90 warpgroup
 * tensor-core products, head dim 64.
 *
 * A block has 1 or 2 warpgroups of 4 warps, each owning 64 rows (queries
 * in the forward and the dQ pass, keys in the dK/dV pass); warp w of a
 * warpgroup holds rows 16w.. 16w + 15 of its 64 in the fragment layout of
 * attention_common.cuh, so the softmax, the masks and the stores are
 * attention.cu's, one m-tile a warp. The products are wgmma.m64nNk16:
 * - both operands in shared memory (S = Q K^T, dP = dO V^T, and in the
 *   dK/dV pass S^T = K Q^T, dP^T = V dO^T), both K-major;
 * - the A operand in registers, the probabilities or dS rounded to bf16
 *   straight from the accumulators, times a B operand in shared memory
 *   whose rows are the product's k (O += P V, dQ += dS K, dV += P^T dO,
 *   dK += dS^T Q): the same tiles read N-major (the transpose bit).
 * So one copy of each tile serves both products, and no operand passes
 * through the registers on its way to the tensor cores.
 *
 * Shared tiles: rows of 64 bf16 (128 bytes), 16-byte chunk c of row r
 * stored at chunk c ^ (r % 8), tiles 1024-byte aligned: the 128-byte
 * swizzle of the wgmma descriptors, in which the 8 chunks of any column
 * of 8 rows fall in distinct bank groups. Tiles come in by cp.async,
 * double-buffered as in attention.cu; a proxy fence makes them visible
 * to the tensor cores' (async) reads before the block barrier.
 *
 * Each product is issued, committed and waited for within the warpgroup
 * (wgmma.wait_group 0) before its accumulators are read; the warpgroups
 * of a block and the blocks of an SM overlap each other's softmax and
 * products.
 */
#include <math.h>
#include <stdint.h>

#include "attention_common.cuh"

enum { WG_THREADS = 128, ROWB = 128 /* bytes a row of 64 bf16 */ };

/* ---- PTX ----------------------------------------------------------------- */

/* Makes this thread's generic-proxy writes to shared memory (cp.async
 * included, once waited for) visible to the async proxy (wgmma). */
static __device__ __forceinline__ void fence_proxy_async(void) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Orders the registers' prior writes before the next wgmma. */
static __device__ __forceinline__ void wg_fence(void) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_commit(void) {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wg_wait_all(void) {
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/* Ties an accumulator's registers to the wait before it, so that no read
 * of them is scheduled ahead of the wait. */
template <int N>
static __device__ __forceinline__ void wg_hold(float (*d)[4]) {
#pragma unroll
  for (int i = 0; i < N; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) asm volatile("" : "+f"(d[i][e])::"memory");
}

/* The descriptor of a 128-byte-swizzled tile at shared address addr
 * (1024-byte aligned, or that plus 32 bytes per k-step of 16 columns):
 * start address, leading offset 16 (unused by swizzled layouts), stride
 * 1024 bytes between groups of 8 rows, swizzle mode 1 (128 bytes). As
 * an N-major B operand the same fields read rows as k and the 64
 * columns as n. Adding 2 to a descriptor moves it 32 bytes: one k-step. */
static __device__ __forceinline__ uint64_t sw128_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) |
         (1ull << 62);
}

/* d (64 x N, the warpgroup's accumulator) = (accumulate ? d : 0) + A B^T,
 * A (64 x 16) and B (N x 16) K-major in shared memory. */
template <int N>
static __device__ __forceinline__ void wgmma_ss(float (*d)[4], uint64_t a, uint64_t b,
                                                int accumulate);

/* The 32 accumulator operands of n-blocks n0 .. n0 + 7 (64 columns). */
#define WG_ACC64(d, n0)                                                                       \
  "+f"(d[n0][0]), "+f"(d[n0][1]), "+f"(d[n0][2]), "+f"(d[n0][3]), "+f"(d[n0 + 1][0]),        \
      "+f"(d[n0 + 1][1]), "+f"(d[n0 + 1][2]), "+f"(d[n0 + 1][3]), "+f"(d[n0 + 2][0]),        \
      "+f"(d[n0 + 2][1]), "+f"(d[n0 + 2][2]), "+f"(d[n0 + 2][3]), "+f"(d[n0 + 3][0]),        \
      "+f"(d[n0 + 3][1]), "+f"(d[n0 + 3][2]), "+f"(d[n0 + 3][3]), "+f"(d[n0 + 4][0]),        \
      "+f"(d[n0 + 4][1]), "+f"(d[n0 + 4][2]), "+f"(d[n0 + 4][3]), "+f"(d[n0 + 5][0]),        \
      "+f"(d[n0 + 5][1]), "+f"(d[n0 + 5][2]), "+f"(d[n0 + 5][3]), "+f"(d[n0 + 6][0]),        \
      "+f"(d[n0 + 6][1]), "+f"(d[n0 + 6][2]), "+f"(d[n0 + 6][3]), "+f"(d[n0 + 7][0]),        \
      "+f"(d[n0 + 7][1]), "+f"(d[n0 + 7][2]), "+f"(d[n0 + 7][3])
#define WG_REGS32                                                                             \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_REGS64_HI                                                                          \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
  "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

template <>
__device__ __forceinline__ void wgmma_ss<64>(float (*d)[4], uint64_t a, uint64_t b,
                                              int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32
               "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : WG_ACC64(d, 0)
               : "l"(a), "l"(b), "r"(accumulate));
}

template <>
__device__ __forceinline__ void wgmma_ss<128>(float (*d)[4], uint64_t a, uint64_t b,
                                               int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_REGS32 ", " WG_REGS64_HI
               "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : WG_ACC64(d, 0), WG_ACC64(d, 8)
               : "l"(a), "l"(b), "r"(accumulate));
}

/* d (64 x 64) += A B, A (64 x 16) the warpgroup's bf16 fragments in
 * registers, B (16 x 64) in shared memory N-major: its 16 rows are k. */
static __device__ __forceinline__ void wgmma_rs_nmajor(float (*d)[4], const uint32_t a[4],
                                                       uint64_t b) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" WG_REGS32
               "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
               : WG_ACC64(d, 0)
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}
#undef WG_ACC64
#undef WG_REGS32
#undef WG_REGS64_HI

/* ---- end PTX ------------------------------------------------------------- */

/* ROWS rows of 64 bf16 from global rows `stride` elements apart (the first
 * nvalid real, the rest zero) into the swizzled tile at shared address
 * dst, by cp.async with NT threads; the caller commits. Thread t copies
 * chunk t % 8 of rows t / 8 + j NT / 8: its chunk's swizzled place is the
 * same in all of them (NT / 8 is a multiple of 8). */
template <int ROWS, int NT>
static __device__ __forceinline__ void tile_sw_async(uint32_t dst, const bf16 *src,
                                                     size_t stride, int nvalid) {
  constexpr int STEP = NT / 8;
  static_assert(STEP % 8 == 0 && ROWS % STEP == 0, "rows a pass must keep the swizzle");
  const int r0 = (int)threadIdx.x / 8, c = (int)threadIdx.x % 8;
  const uint32_t d0 = dst + r0 * ROWB + ((c ^ (r0 & 7)) << 4);
  const bf16 *s0 = src + c * 8;
#pragma unroll
  for (int j = 0; j < ROWS / STEP; j++) {
    int r = r0 + j * STEP;
    bool ok = r < nvalid;
    cp_async16(d0 + j * STEP * ROWB, s0 + (size_t)(ok ? r : 0) * stride, ok);
  }
}

/* The block's shared memory from a 1024-byte boundary: its shared
 * address, and the generic pointer to the same byte. */
struct sw_base {
  uint32_t addr;
  unsigned char *ptr;
};
static __device__ __forceinline__ sw_base aligned_smem(unsigned char *raw) {
  uint32_t a = smem_addr(raw), al = (a + 1023u) & ~1023u;
  return {al, raw + (al - a)};
}

/* ---- forward ------------------------------------------------------------- */

/* Where a thread of a query block stands (forward and dQ: grid (B*NH,
 * query blocks of 64 WG rows, the heaviest first), key blocks of BN):
 * its warpgroup, warp, lane (g = lane / 4, tq = lane % 4), batch row b,
 * head h, the block's first query q0 and the warpgroup's row0; the key
 * blocks the block visits (nkt) and those reaching the warpgroup's
 * queries (my_nkt: it skips the rest, which the other may need). */
struct query_pos {
  int wg, warp, lane, g, tq, b, h, q0, row0, nkt, my_nkt;
};
template <int WG, int BN>
static __device__ __forceinline__ query_pos query_block(int T, int NH) {
  query_pos p;
  p.wg = threadIdx.x / WG_THREADS;
  p.warp = (threadIdx.x / 32) % 4;
  p.lane = threadIdx.x % 32;
  p.g = p.lane / 4;
  p.tq = p.lane % 4;
  const int bh = (int)blockIdx.x;
  p.b = bh / NH;
  p.h = bh % NH;
  p.q0 = (int)(gridDim.y - 1 - blockIdx.y) * WG * 64;
  p.row0 = p.q0 + p.wg * 64;
  const int nkv = (T + BN - 1) / BN;
  p.nkt = min(nkv, (p.q0 + WG * 64 - 1) / BN + 1);
  p.my_nkt = min(nkv, (p.row0 + 63) / BN + 1);
  return p;
}

/* Q (WG x 64 rows), K x 2, V x 2 (BN rows each), plus the alignment. */
template <int WG, int BN>
struct fwdw_smem {
  static constexpr size_t bytes = (size_t)(WG * 64 + 4 * BN) * ROWB + 1024;
};

/* grid (B*NH, query blocks of 64 WG rows, the heaviest first); key
 * blocks of BN. Warpgroup wg's queries stop at row0 + 63: it skips the
 * key blocks past them (the block's other warpgroup may still need
 * them). The registers are capped for 4 / WG blocks an SM with key
 * blocks of 64 (one warpgroup: 4 blocks, 16 warps), 2 / WG with 128. */
template <int WG, int BN>
static __global__ void __launch_bounds__(WG * WG_THREADS, BN == 64 ? 4 / WG : 2 / WG)
    attention_forward_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                            size_t ld, int T, int NH, int NKV, float sl2) {
  constexpr int BM = WG * 64, NT = WG * WG_THREADS, NBN = BN / 8, KBN = BN / 16;
  extern __shared__ __align__(1024) unsigned char smem[];
  const uint32_t Qs = aligned_smem(smem).addr, Ks = Qs + BM * ROWB, Vs = Ks + 2 * BN * ROWB;
  const auto [wg, warp, lane, g, tq, b, h, q0, row0, nkt, my_nkt] = query_block<WG, BN>(T, NH);
  const size_t QD = (size_t)NH * 64, kvoff = (size_t)b * T * ld + (size_t)(h / (NH / NKV)) * 64;
  const bf16 *kb = k + kvoff, *vb = v + kvoff; /* the kv head's first key and value */

  tile_sw_async<BM, NT>(Qs, q + ((size_t)b * T + q0) * ld + (size_t)h * 64, ld, min(BM, T - q0));
  tile_sw_async<BN, NT>(Ks, kb, ld, min(BN, T));
  tile_sw_async<BN, NT>(Vs, vb, ld, min(BN, T));
  cp_async_commit();

  const uint64_t qdesc = sw128_desc(Qs + wg * 64 * ROWB);
  float o[8][4];
#pragma unroll
  for (int nb = 0; nb < 8; nb++) o[nb][0] = o[nb][1] = o[nb][2] = o[nb][3] = 0.0f;
  /* rows g and g + 8 of the warp: running max (scaled, log2 units) and
   * the lane's partial sum */
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int qi0 = row0 + warp * 16 + g;

  for (int kt = 0; kt < nkt; kt++) {
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads(); /* block kt is here; everyone is done with block kt - 1 */
    if (kt + 1 < nkt) {
      int k0 = (kt + 1) * BN;
      uint32_t off = ((kt + 1) & 1) * BN * ROWB;
      tile_sw_async<BN, NT>(Ks + off, kb + (size_t)k0 * ld, ld, min(BN, T - k0));
      tile_sw_async<BN, NT>(Vs + off, vb + (size_t)k0 * ld, ld, min(BN, T - k0));
    }
    cp_async_commit();
    if (kt >= my_nkt) continue; /* past this warpgroup's last query */
    const uint32_t Kt = Ks + (kt & 1) * BN * ROWB, Vt = Vs + (kt & 1) * BN * ROWB;

    float s[NBN][4];
    wg_fence();
    const uint64_t kdesc = sw128_desc(Kt);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_ss<BN>(s, qdesc + 2 * kk, kdesc + 2 * kk, kk);
    wg_commit();
    wg_wait_all();
    wg_hold<NBN>(s);

    if (kt * BN + BN - 1 > row0) /* blocks reaching past the warpgroup's first query, or T */
#pragma unroll
      for (int nb = 0; nb < NBN; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          int key = kt * BN + nb * 8 + 2 * tq + (e & 1), qi = qi0 + 8 * (e >> 1);
          if (key > qi || key >= T) s[nb][e] = -INFINITY;
        }

    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nb = 0; nb < NBN; nb++) {
      mx[0] = fmaxf(mx[0], fmaxf(s[nb][0], s[nb][1]));
      mx[1] = fmaxf(mx[1], fmaxf(s[nb][2], s[nb][3]));
    }
    float mb[2], alpha[2];
#pragma unroll
    for (int r = 0; r < 2; r++) { /* the row's 4 lanes are adjacent */
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      float m_new = fmaxf(m_run[r], mx[r] * sl2);
      mb[r] = m_new == -INFINITY ? 0.0f : m_new; /* a row with nothing yet */
      alpha[r] = exp2f(m_run[r] - mb[r]);
      m_run[r] = m_new;
    }
    uint32_t pf[KBN][4];
    float rs[2] = {0.0f, 0.0f};
#pragma unroll
    for (int nb = 0; nb < NBN; nb++) {
      float p0 = exp2f(fmaf(s[nb][0], sl2, -mb[0])), p1 = exp2f(fmaf(s[nb][1], sl2, -mb[0]));
      float p2 = exp2f(fmaf(s[nb][2], sl2, -mb[1])), p3 = exp2f(fmaf(s[nb][3], sl2, -mb[1]));
      rs[0] += p0 + p1;
      rs[1] += p2 + p3;
      pf[nb / 2][(nb & 1) * 2] = pack_bf16(p0, p1);
      pf[nb / 2][(nb & 1) * 2 + 1] = pack_bf16(p2, p3);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) l_run[r] = l_run[r] * alpha[r] + rs[r];
#pragma unroll
    for (int nb = 0; nb < 8; nb++) {
      o[nb][0] *= alpha[0];
      o[nb][1] *= alpha[0];
      o[nb][2] *= alpha[1];
      o[nb][3] *= alpha[1];
    }
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < KBN; kk++) wgmma_rs_nmajor(o, pf[kk], sw128_desc(Vt + kk * 16 * ROWB));
    wg_commit();
    wg_wait_all();
    wg_hold<8>(o);
  }

#pragma unroll
  for (int r = 0; r < 2; r++) {
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 1);
    l_run[r] += __shfl_xor_sync(0xffffffffu, l_run[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; r++) {
    int qi = qi0 + 8 * r;
    if (qi >= T) continue;
    float inv = 1.0f / l_run[r];
    bf16 *orow = out + ((size_t)b * T + qi) * QD + (size_t)h * 64 + 2 * tq;
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
      *(uint32_t *)(orow + nb * 8) = pack_bf16(o[nb][2 * r] * inv, o[nb][2 * r + 1] * inv);
    if (tq == 0) lse[((size_t)b * NH + h) * T + qi] = (m_run[r] + log2f(l_run[r])) * LN2;
  }
}

/* ---- backward: dQ (and delta) -------------------------------------------- */

/* Q, dO (WG x 64 rows each), K x 2, V x 2 (64 rows each), the block's
 * delta, the alignment. */
template <int WG>
struct dqw_smem {
  static constexpr size_t rows = (size_t)(2 * WG * 64 + 4 * 64) * ROWB;
  static constexpr size_t bytes = rows + WG * 64 * sizeof(float) + 1024;
};

/* grid (B*NH, query blocks of 64 WG rows): dQ of the block's queries of
 * one head over key blocks of 64, and their delta = rowsum(dO * O) into
 * delta (B, NH, T), as attention.cu's dQ kernel. */
template <int WG>
static __global__ void __launch_bounds__(WG * WG_THREADS, 4 / WG)
    attention_dq_wgmma(bf16 *dq, float *delta, const bf16 *q, const bf16 *k, const bf16 *v,
                       size_t ld, const bf16 *out, const bf16 *dout, const float *lse,
                       const float *rcos, const float *rsin, int T, int NH, int NKV, float sl2,
                       float scale) {
  constexpr int BM = WG * 64, NT = WG * WG_THREADS, BN = 64;
  extern __shared__ __align__(1024) unsigned char smem[];
  const sw_base base = aligned_smem(smem);
  const uint32_t Qs = base.addr, dOs = Qs + BM * ROWB, Ks = dOs + BM * ROWB,
                 Vs = Ks + 2 * BN * ROWB;
  float *dl_s = (float *)(base.ptr + dqw_smem<WG>::rows);
  const auto [wg, warp, lane, g, tq, b, h, q0, row0, nkt, my_nkt] = query_block<WG, BN>(T, NH);
  const size_t QD = (size_t)NH * 64, kvoff = (size_t)b * T * ld + (size_t)(h / (NH / NKV)) * 64;
  const bf16 *kb = k + kvoff, *vb = v + kvoff; /* the kv head's first key and value */
  const size_t qoff = ((size_t)b * T + q0) * ld + (size_t)h * 64;
  const size_t ooff = ((size_t)b * T + q0) * QD + (size_t)h * 64;
  const float *lse_bh = lse + ((size_t)b * NH + h) * T;
  float *delta_bh = delta + ((size_t)b * NH + h) * T;

  tile_sw_async<BM, NT>(Qs, q + qoff, ld, min(BM, T - q0));
  tile_sw_async<BM, NT>(dOs, dout + ooff, QD, min(BM, T - q0));
  tile_sw_async<BN, NT>(Ks, kb, ld, min(BN, T));
  tile_sw_async<BN, NT>(Vs, vb, ld, min(BN, T));
  cp_async_commit();

  const int rb = wg * 64 + warp * 16; /* the warp's first row in the block */
  warp_delta<64>(dl_s, delta_bh, out, dout, ooff, QD, q0, rb, T, lane); /* while the tiles load */
  __syncwarp();
  const int qi0 = row0 + warp * 16 + g;
  float dl[2], ls[2]; /* delta and lse * log2(e) of rows g, g + 8 */
#pragma unroll
  for (int r = 0; r < 2; r++) {
    dl[r] = dl_s[rb + g + 8 * r];
    ls[r] = qi0 + 8 * r < T ? lse_bh[qi0 + 8 * r] * LOG2E : INFINITY;
  }

  const uint64_t qdesc = sw128_desc(Qs + wg * 64 * ROWB), ddesc = sw128_desc(dOs + wg * 64 * ROWB);
  float acc[8][4];
#pragma unroll
  for (int nb = 0; nb < 8; nb++) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.0f;

  for (int kt = 0; kt < nkt; kt++) {
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    if (kt + 1 < nkt) {
      int k0 = (kt + 1) * BN;
      uint32_t off = ((kt + 1) & 1) * BN * ROWB;
      tile_sw_async<BN, NT>(Ks + off, kb + (size_t)k0 * ld, ld, min(BN, T - k0));
      tile_sw_async<BN, NT>(Vs + off, vb + (size_t)k0 * ld, ld, min(BN, T - k0));
    }
    cp_async_commit();
    if (kt >= my_nkt) continue;
    const uint32_t Kt = Ks + (kt & 1) * BN * ROWB, Vt = Vs + (kt & 1) * BN * ROWB;

    float s[8][4], dp[8][4];
    wg_fence();
    const uint64_t kdesc = sw128_desc(Kt), vdesc = sw128_desc(Vt);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { /* S = Q K^T, dP = dO V^T */
      wgmma_ss<64>(s, qdesc + 2 * kk, kdesc + 2 * kk, kk);
      wgmma_ss<64>(dp, ddesc + 2 * kk, vdesc + 2 * kk, kk);
    }
    wg_commit();
    wg_wait_all();
    wg_hold<8>(s);
    wg_hold<8>(dp);
    const bool mask = kt * BN + BN - 1 > row0;
#pragma unroll
    for (int nb = 0; nb < 8; nb++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int r = e >> 1;
        float p = exp2f(fmaf(s[nb][e], sl2, -ls[r]));
        if (mask) {
          int key = kt * BN + nb * 8 + 2 * tq + (e & 1);
          if (key > qi0 + 8 * r || key >= T) p = 0.0f;
        }
        s[nb][e] = p * (dp[nb][e] - dl[r]); /* dS, unscaled */
      }
    uint32_t a[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) c_to_a(a[kk], s, kk);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_rs_nmajor(acc, a[kk], sw128_desc(Kt + kk * 16 * ROWB));
    wg_commit();
    wg_wait_all();
    wg_hold<8>(acc);
  }
  store_rows<64>(dq + qoff + (size_t)rb * ld, ld, q0 + rb, T, acc, scale, rcos, rsin, lane);
}

/* ---- backward: dK, dV ---------------------------------------------------- */

/* K, V (WG x 64 rows each), Q x 2, dO x 2 (64 rows each), then lse x 2
 * and delta x 2 (64 floats each), the alignment. */
template <int WG>
struct dkdvw_smem {
  static constexpr size_t rows = (size_t)(2 * WG * 64 + 4 * 64) * ROWB;
  static constexpr size_t bytes = rows + 4 * 64 * sizeof(float) + 1024;
};

/* grid (B*NKV, key blocks of 64 WG, the heaviest first): dK, dV of the
 * block's keys of one kv head, over the query heads of its group and the
 * query tiles of 64 from the block's first key on, as attention.cu's
 * dK/dV kernel. A warpgroup skips the tiles whose queries all precede its
 * keys. BPS blocks an SM: the registers are capped for them (one
 * warpgroup: 2 leave it 192 registers a thread, 3 take 168 without
 * spilling, and are 6% faster on the H200). */
template <int WG, int BPS>
static __global__ void __launch_bounds__(WG * WG_THREADS, BPS)
    attention_dkdv_wgmma(bf16 *dk, bf16 *dv, const bf16 *q, const bf16 *k, const bf16 *v,
                         size_t ld, const bf16 *dout, const float *lse, const float *delta,
                         const float *rcos, const float *rsin, int T, int NH, int NKV, float sl2,
                         float scale) {
  constexpr int BK = WG * 64, NT = WG * WG_THREADS, BQ = 64;
  static_assert(NT >= 2 * BQ, "a thread for each lse and delta of a tile");
  extern __shared__ __align__(1024) unsigned char smem[];
  const sw_base base = aligned_smem(smem);
  const uint32_t Ks = base.addr, Vs = Ks + BK * ROWB, Qs = Vs + BK * ROWB, dOs = Qs + 2 * BQ * ROWB;
  float *ls_s = (float *)(base.ptr + dkdvw_smem<WG>::rows), *dl_s = ls_s + 2 * BQ;
  const int wg = threadIdx.x / WG_THREADS, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const int kblk = (int)blockIdx.y, bk = (int)blockIdx.x;
  const int b = bk / NKV, kvh = bk % NKV, G = NH / NKV, k0 = kblk * BK, kw0 = k0 + wg * 64;
  const int qt0 = k0 / BQ, nq = (T + BQ - 1) / BQ - qt0, steps = G * nq;
  const size_t QD = (size_t)NH * 64;
  const size_t koff = ((size_t)b * T + k0) * ld + (size_t)kvh * 64;

  /* step st: query head kvh*G + st / nq, query tile qt0 + st % nq, into
   * buffer st & 1 */
  auto load_step = [&](int st) {
    int h = kvh * G + st / nq, q0 = (qt0 + st % nq) * BQ, buf = st & 1, nv = min(BQ, T - q0);
    size_t qoff = ((size_t)b * T + q0) * ld + (size_t)h * 64;
    size_t ooff = ((size_t)b * T + q0) * QD + (size_t)h * 64;
    tile_sw_async<BQ, NT>(Qs + buf * BQ * ROWB, q + qoff, ld, nv);
    tile_sw_async<BQ, NT>(dOs + buf * BQ * ROWB, dout + ooff, QD, nv);
    if (threadIdx.x < 2 * BQ) { /* one float a thread: lse, then delta */
      int j = threadIdx.x % BQ;
      bool ok = j < nv;
      size_t roff = ((size_t)b * NH + h) * T + q0 + (ok ? j : 0);
      bool is_lse = threadIdx.x < BQ;
      cp_async4(smem_addr((is_lse ? ls_s : dl_s) + buf * BQ + j), (is_lse ? lse : delta) + roff,
                ok);
    }
  };

  tile_sw_async<BK, NT>(Ks, k + koff, ld, min(BK, T - k0));
  tile_sw_async<BK, NT>(Vs, v + koff, ld, min(BK, T - k0));
  load_step(0);
  cp_async_commit();

  const uint64_t kdesc = sw128_desc(Ks + wg * 64 * ROWB), vdesc = sw128_desc(Vs + wg * 64 * ROWB);
  float dka[8][4], dva[8][4];
#pragma unroll
  for (int nb = 0; nb < 8; nb++)
#pragma unroll
    for (int e = 0; e < 4; e++) dka[nb][e] = dva[nb][e] = 0.0f;
  const int key0 = kw0 + warp * 16 + g; /* keys of the lane's rows: key0, key0 + 8 */

  for (int st = 0; st < steps; st++) {
    const int q0 = (qt0 + st % nq) * BQ;
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    if (st + 1 < steps) load_step(st + 1);
    cp_async_commit();
    /* every query of the tile precedes the warpgroup's keys, or the
     * warpgroup's keys are all past T */
    if (q0 + BQ <= kw0 || kw0 >= T) continue;
    const int buf = st & 1;
    const uint32_t Qt = Qs + buf * BQ * ROWB, dOt = dOs + buf * BQ * ROWB;
    const float *ls = ls_s + buf * BQ, *dl = dl_s + buf * BQ;

    float s[8][4], dp[8][4];
    wg_fence();
    const uint64_t qdesc = sw128_desc(Qt), odesc = sw128_desc(dOt);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { /* S^T = K Q^T, dP^T = V dO^T */
      wgmma_ss<64>(s, kdesc + 2 * kk, qdesc + 2 * kk, kk);
      wgmma_ss<64>(dp, vdesc + 2 * kk, odesc + 2 * kk, kk);
    }
    wg_commit();
    wg_wait_all();
    wg_hold<8>(s);
    wg_hold<8>(dp);
    /* tiles reaching the warpgroup's diagonal mask later keys; a partial
     * last tile its rows past T (whose lse and delta were zero-filled) */
    const bool mask = q0 < kw0 + 64 || q0 + BQ > T;
    dkdv_probs(s, dp, ls, dl, q0, key0, T, mask, sl2, tq); /* P^T, dS^T */
    uint32_t pa[4][4], da[4][4];
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
      c_to_a(pa[kk], s, kk);
      c_to_a(da[kk], dp, kk);
    }
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < 4; kk++) /* dV += P^T dO */
      wgmma_rs_nmajor(dva, pa[kk], sw128_desc(dOt + kk * 16 * ROWB));
#pragma unroll
    for (int kk = 0; kk < 4; kk++) /* dK += dS^T Q */
      wgmma_rs_nmajor(dka, da[kk], sw128_desc(Qt + kk * 16 * ROWB));
    wg_commit();
    wg_wait_all();
    wg_hold<8>(dva);
    wg_hold<8>(dka);
  }
  size_t off = koff + (size_t)(wg * 64 + warp * 16) * ld;
  store_rows<64>(dk + off, ld, kw0 + warp * 16, T, dka, scale, rcos, rsin, lane);
  store_rows<64>(dv + off, ld, kw0 + warp * 16, T, dva, 1.0f, NULL, NULL, lane);
}

/* ---- launchers ----------------------------------------------------------- */

template <typename K>
static bool set_smem(K kernel, size_t bytes) {
  return NC_CUDA(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

bool nc_attention_wgmma_usable(int HD) {
  if (HD != 64) return false;
  static int known[64]; /* per device: 0 unknown, 1 no, 2 yes (ranks may be threads) */
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0) return false;
  int k = dev < 64 ? __atomic_load_n(&known[dev], __ATOMIC_RELAXED) : 0;
  if (k) return k == 2;
  bool yes =
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
      major == 9 && minor == 0;
  if (dev < 64) __atomic_store_n(&known[dev], yes ? 2 : 1, __ATOMIC_RELAXED);
  return yes;
}

template <int WG, int BN>
static bool forward_wg(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                       size_t ld, int B, int T, int NH, int NKV, cudaStream_t s) {
  size_t smem = fwdw_smem<WG, BN>::bytes;
  if (!set_smem(attention_forward_wgmma<WG, BN>, smem)) return false;
  dim3 grid((unsigned)(B * NH), (unsigned)((T + WG * 64 - 1) / (WG * 64)));
  attention_forward_wgmma<WG, BN><<<grid, WG * WG_THREADS, smem, s>>>(out, lse, q, k, v, ld, T, NH,
                                                                     NKV, LOG2E / 8.0f);
  return NC_LAUNCHED();
}

/* Key blocks as tall as the query block: 64 for one warpgroup, 128 for two. */
bool nc_attention_wgmma_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                const bf16 *v, size_t ld, int B, int T, int NH, int NKV,
                                int groups, cudaStream_t s) {
  return groups == 1 ? forward_wg<1, 64>(out, lse, q, k, v, ld, B, T, NH, NKV, s)
                     : forward_wg<2, 128>(out, lse, q, k, v, ld, B, T, NH, NKV, s);
}

template <int WGQ, int WGK, int BPS>
static bool backward_wg(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                        const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                        const bf16 *v, size_t ld, int B, int T, int NH, int NKV,
                        const float *rcos, const float *rsin, cudaStream_t s) {
  size_t dq_bytes = dqw_smem<WGQ>::bytes, kv_bytes = dkdvw_smem<WGK>::bytes;
  if (!set_smem(attention_dq_wgmma<WGQ>, dq_bytes) ||
      !set_smem(attention_dkdv_wgmma<WGK, BPS>, kv_bytes))
    return false;
  const float scale = 0.125f, sl2 = scale * LOG2E; /* 1 / sqrt(64) */
  unsigned qblocks = (unsigned)((T + WGQ * 64 - 1) / (WGQ * 64));
  unsigned kblocks = (unsigned)((T + WGK * 64 - 1) / (WGK * 64));
  attention_dq_wgmma<WGQ><<<dim3((unsigned)(B * NH), qblocks), WGQ * WG_THREADS, dq_bytes, s>>>(
      dq, delta, q, k, v, ld, out, dout, lse, rcos, rsin, T, NH, NKV, sl2, scale);
  if (!NC_LAUNCHED()) return false;
  attention_dkdv_wgmma<WGK, BPS>
      <<<dim3((unsigned)(B * NKV), kblocks), WGK * WG_THREADS, kv_bytes, s>>>(
      dk, dv, q, k, v, ld, dout, lse, delta, rcos, rsin, T, NH, NKV, sl2, scale);
  return NC_LAUNCHED();
}

bool nc_attention_wgmma_backward(bf16 *dq, bf16 *dk, bf16 *dv, float *delta, const bf16 *dout,
                                 const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                                 const bf16 *v, size_t ld, int B, int T, int NH, int NKV,
                                 const float *rope_cos, const float *rope_sin, int dq_groups,
                                 int dkdv_groups, int dkdv_blocks, cudaStream_t s) {
#define BWD(a, b, bps)                                                                           \
  backward_wg<a, b, bps>(dq, dk, dv, delta, dout, out, lse, q, k, v, ld, B, T, NH, NKV,        \
                         rope_cos, rope_sin, s)
  if (dkdv_groups == 2) return dq_groups == 1 ? BWD(1, 2, 1) : BWD(2, 2, 1);
  if (dkdv_blocks == 2) return dq_groups == 1 ? BWD(1, 1, 2) : BWD(2, 1, 2);
  return dq_groups == 1 ? BWD(1, 1, 3) : BWD(2, 1, 3);
#undef BWD
}
