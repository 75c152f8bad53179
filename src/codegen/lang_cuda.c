/* lang_cuda.c: the CUDA C language table (sm_90, NVRTC or nvcc).
 *
 * f16 is stored as __half (cuda_fp16.h) and computed as float rounded to
 * half after every operation, exactly as the C target computes it, so the
 * C emulation of a launch gives the numbers the GPU gives (no FMA
 * contraction is assumed on either side: compile with -fmad=false to
 * compare bit for bit). The helpers mirror the C preamble's semantics
 * (floordiv toward negative infinity, NaN-propagating min/max, saturating
 * float->int). Under NVRTC no system header is available, so the fixed
 * width integer types and INFINITY/NAN are defined here.
 *
 * A program without f16 values is emitted behind `#define DG_NO_F16`,
 * which leaves cuda_fp16.h out (a fixed cost of every compilation, about
 * 7 ms of NVRTC's front end, a tenth of a small kernel's compile time).
 *
 * Tensor-core fragments are nvcuda::wmma fragments (mma.h, included only
 * by programs with tensorized blocks); shared arrays they load from or
 * store to are aligned to 32 bytes, dynamic shared memory to 128.
 *
 * Asynchronous copies (sm_80 and later) are PTX cp.async of 4, 8 (.ca:
 * cached in L1) or 16 bytes (.cg: L2 only, as TVM issues them), with
 * cp.async.commit_group and cp.async.wait_group; each asm statement
 * clobbers memory, so that the compiler moves no shared access across it.
 */
#include "dragon/codegen.h"
#include "codegen/emit_impl.h"

static const char cuda_preamble[] =
    "#ifndef DG_NO_F16\n"
    "#include <cuda_fp16.h>\n"
    "#endif\n"
    "#ifdef __CUDACC_RTC__\n"
    "typedef signed char int8_t;\n"
    "typedef short int16_t;\n"
    "typedef int int32_t;\n"
    "typedef long long int64_t;\n"
    "typedef unsigned char uint8_t;\n"
    "typedef unsigned short uint16_t;\n"
    "typedef unsigned int uint32_t;\n"
    "typedef unsigned long long uint64_t;\n"
    "#define INT64_C(x) x##LL\n"
    "#else\n"
    "#include <stdint.h>\n"
    "#include <math.h>\n"
    "#endif\n"
    "#ifndef INFINITY\n"
    "#define INFINITY __int_as_float(0x7f800000)\n"
    "#endif\n"
    "#ifndef NAN\n"
    "#define NAN __int_as_float(0x7fffffff)\n"
    "#endif\n"
    "#define DG_DEV static __device__ __forceinline__\n"
    "#ifndef DG_NO_F16\n"
    "DG_DEV float dg_rh(float f) { return __half2float(__float2half_rn(f)); }\n"
    "#endif\n"
    "DG_DEV int32_t dg_floordiv_i32(int32_t a, int32_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  if (b == -1) return (int32_t)(0u - (uint32_t)a);\n"
    "  int32_t q = a / b;\n"
    "  if (a % b != 0 && ((a < 0) != (b < 0))) q--;\n"
    "  return q;\n"
    "}\n"
    "DG_DEV int32_t dg_floormod_i32(int32_t a, int32_t b) {\n"
    "  if (b == 0 || b == -1) return 0;\n"
    "  int32_t r = a % b;\n"
    "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
    "  return r;\n"
    "}\n"
    "DG_DEV int64_t dg_floordiv_i64(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  if (b == -1) return (int64_t)(0ull - (uint64_t)a);\n"
    "  int64_t q = a / b;\n"
    "  if (a % b != 0 && ((a < 0) != (b < 0))) q--;\n"
    "  return q;\n"
    "}\n"
    "DG_DEV int64_t dg_floormod_i64(int64_t a, int64_t b) {\n"
    "  if (b == 0 || b == -1) return 0;\n"
    "  int64_t r = a % b;\n"
    "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
    "  return r;\n"
    "}\n"
    "DG_DEV int32_t dg_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }\n"
    "DG_DEV int32_t dg_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }\n"
    "DG_DEV int64_t dg_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "DG_DEV int64_t dg_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }\n"
    "DG_DEV float dg_min_f32(float a, float b) { return (a < b || a != a) ? a : b; }\n"
    "DG_DEV float dg_max_f32(float a, float b) { return (a > b || a != a) ? a : b; }\n"
    "DG_DEV double dg_min_f64(double a, double b) { return (a < b || a != a) ? a : b; }\n"
    "DG_DEV double dg_max_f64(double a, double b) { return (a > b || a != a) ? a : b; }\n"
    "DG_DEV int64_t dg_f2i(double x, int64_t lo, int64_t hi) {\n"
    "  if (x != x) return 0;\n"
    "  if (x <= (double)lo) return lo;\n"
    "  if (x >= (double)hi) return hi;\n"
    "  return (int64_t)x;\n"
    "}\n"
    "DG_DEV float dg_rsqrtf(float x) { return 1.0f / sqrtf(x); }\n"
    "DG_DEV double dg_rsqrt(double x) { return 1.0 / sqrt(x); }\n"
    "DG_DEV float dg_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "DG_DEV double dg_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }\n"
    "#define DG_CP_ASYNC(n, cache) \\\n"
    "  DG_DEV void dg_cp_async##n(void *dst, const void *src) { \\\n"
    "    asm volatile(\"cp.async.\" cache \".shared.global [%0], [%1], \" #n \";\\n\" \\\n"
    "                 :: \"r\"((unsigned)__cvta_generic_to_shared(dst)), \"l\"(src) : \"memory\"); \\\n"
    "  }\n"
    "DG_CP_ASYNC(4, \"ca\")\n"
    "DG_CP_ASYNC(8, \"ca\")\n"
    "DG_CP_ASYNC(16, \"cg\")\n"
    "#define dg_cp_async_commit() asm volatile(\"cp.async.commit_group;\\n\" ::: \"memory\")\n"
    "#define dg_cp_async_wait(n) asm volatile(\"cp.async.wait_group %0;\\n\" :: \"n\"(n) : \"memory\")\n";

const dg_lang codegen_lang_cuda = {
    .name = "cuda",
    .kernel_prefix = "extern \"C\" __global__ ",
    .helper_prefix = "static __device__ __forceinline__ ",
    .restrict_kw = "__restrict__",
    .barrier = "__syncthreads();",
    .scope_prefix = {[DG_SCOPE_SHARED] = "__shared__ "},
    .thread_index =
        {
            [DG_TAG_BLOCK_X] = "blockIdx.x",
            [DG_TAG_BLOCK_Y] = "blockIdx.y",
            [DG_TAG_BLOCK_Z] = "blockIdx.z",
            [DG_TAG_THREAD_X] = "threadIdx.x",
            [DG_TAG_THREAD_Y] = "threadIdx.y",
            [DG_TAG_THREAD_Z] = "threadIdx.z",
        },
    .half_type = "__half",
    .half_to_float = "__half2float",
    .float_to_half = "__float2half_rn",
    .round_half = "dg_rh",
    .float4_type = "float4",
    .half2_type = "__half2",
    .math_f16 = {NULL},
    .math_f32 = CODEGEN_MATH_F32,
    .math_f64 = CODEGEN_MATH_F64,
    .preamble = cuda_preamble,
    .floordiv_fn = "dg_floordiv",
    .floormod_fn = "dg_floormod",
    .min_fn = "dg_min",
    .max_fn = "dg_max",
    .float_to_int_fn = "dg_f2i",
    .inf_literal = "INFINITY",
    .nan_literal = "NAN",
    .max_stack_bytes = 0,
    .malloc_fn = NULL,
    .free_fn = NULL,
    .emulate_threads = false,
    .launch_bounds_fmt = "__launch_bounds__(%lld) ",
    .align16 = "__align__(16) ",
    .unroll_pragma = "#pragma unroll",
    .dyn_shared_decl = "extern __shared__ __align__(128) unsigned char dg_dyn_smem[];",
    .shfl_down_fmt = "__shfl_down_sync(%s, %s, %d, %d)",
    .shfl_fmt = "__shfl_sync(%s, %s, %d, %d)",
    .vec_float = {[2] = "float2", [4] = "float4"},
    .vec_int = {[2] = "int2", [4] = "int4"},
    .vec_bits = {[2] = "unsigned short", [4] = "unsigned int", [8] = "uint2", [16] = "uint4"},
    .lane_field = {"x", "y", "z", "w"},
    .wmma_include = "#include <mma.h>",
    .wmma_ns = "nvcuda::wmma",
    .wmma_align = "__align__(32) ",
    .cp_async_fn = "dg_cp_async",
    .cp_async_commit = "dg_cp_async_commit();",
    .cp_async_wait_fmt = "dg_cp_async_wait(%lld);",
};
