/* lang.c: the C language table and the lookup of tables by name (the CUDA
 * table is in lang_cuda.c); the emitters read nothing target-specific from
 * anywhere else.
 *
 * The C preamble carries the helpers whose semantics must match the IR and
 * the interpreter (src/rt/interp.c) exactly: floordiv/floormod rounding
 * toward negative infinity (x // 0 and x % 0 give 0 rather than trapping, and
 * INT_MIN // -1 wraps), min/max that propagate NaN, float->int conversion that
 * maps NaN to 0 and saturates, and IEEE binary16 conversion with
 * round-to-nearest-even (F16C instructions where the compiler targets them,
 * the same rounding in portable bit arithmetic otherwise).
 */
#include "dragon/codegen.h"
#include "codegen/emit_impl.h"

#include <string.h>

static const char c_preamble[] =
    "#include <math.h>\n"
    "#include <stdint.h>\n"
    "#include <stdlib.h>\n"
    "#include <string.h>\n"
    "#if defined(__F16C__)\n"
    "#include <immintrin.h>\n"
    "static inline float dg_h2f(uint16_t h) { return _cvtsh_ss(h); }\n"
    "static inline uint16_t dg_f2h(float f) { return (uint16_t)_cvtss_sh(f, 0); }\n"
    "#else\n"
    "static inline float dg_h2f(uint16_t h) {\n"
    "  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;\n"
    "  float f;\n"
    "  if (e == 0x1f) x = s | 0x7f800000u | (m << 13);\n"
    "  else if (e) x = s | ((e + 112u) << 23) | (m << 13);\n"
    "  else if (!m) x = s;\n"
    "  else { f = (float)m * 0x1p-24f; memcpy(&x, &f, 4); x |= s; }\n"
    "  memcpy(&f, &x, 4);\n"
    "  return f;\n"
    "}\n"
    "static inline uint16_t dg_f2h(float f) {\n"
    "  uint32_t x, sign, exp, man, h, rem, half;\n"
    "  int e, shift;\n"
    "  memcpy(&x, &f, 4);\n"
    "  sign = (x >> 16) & 0x8000u; exp = (x >> 23) & 0xffu; man = x & 0x7fffffu;\n"
    "  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));\n"
    "  e = (int)exp - 127 + 15;\n"
    "  if (e >= 31) return (uint16_t)(sign | 0x7c00u);\n"
    "  if (e <= 0) {\n"
    "    if (e < -10) return (uint16_t)sign;\n"
    "    man |= 0x800000u; shift = 14 - e;\n"
    "    h = man >> shift; rem = man & ((1u << shift) - 1); half = 1u << (shift - 1);\n"
    "    if (rem > half || (rem == half && (h & 1))) h++;\n"
    "    return (uint16_t)(sign | h);\n"
    "  }\n"
    "  h = ((uint32_t)e << 10) | (man >> 13); rem = man & 0x1fffu;\n"
    "  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;\n"
    "  return (uint16_t)(sign | h);\n"
    "}\n"
    "#endif\n"
    "static inline float dg_rh(float f) { return dg_h2f(dg_f2h(f)); }\n"
    "static inline int32_t dg_floordiv_i32(int32_t a, int32_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  if (b == -1) return (int32_t)(0u - (uint32_t)a);\n"
    "  int32_t q = a / b;\n"
    "  if (a % b != 0 && ((a < 0) != (b < 0))) q--;\n"
    "  return q;\n"
    "}\n"
    "static inline int32_t dg_floormod_i32(int32_t a, int32_t b) {\n"
    "  if (b == 0 || b == -1) return 0;\n"
    "  int32_t r = a % b;\n"
    "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
    "  return r;\n"
    "}\n"
    "static inline int64_t dg_floordiv_i64(int64_t a, int64_t b) {\n"
    "  if (b == 0) return 0;\n"
    "  if (b == -1) return (int64_t)(0ull - (uint64_t)a);\n"
    "  int64_t q = a / b;\n"
    "  if (a % b != 0 && ((a < 0) != (b < 0))) q--;\n"
    "  return q;\n"
    "}\n"
    "static inline int64_t dg_floormod_i64(int64_t a, int64_t b) {\n"
    "  if (b == 0 || b == -1) return 0;\n"
    "  int64_t r = a % b;\n"
    "  if (r != 0 && ((r < 0) != (b < 0))) r += b;\n"
    "  return r;\n"
    "}\n"
    "static inline int32_t dg_min_i32(int32_t a, int32_t b) { return a < b ? a : b; }\n"
    "static inline int32_t dg_max_i32(int32_t a, int32_t b) { return a > b ? a : b; }\n"
    "static inline int64_t dg_min_i64(int64_t a, int64_t b) { return a < b ? a : b; }\n"
    "static inline int64_t dg_max_i64(int64_t a, int64_t b) { return a > b ? a : b; }\n"
    "static inline float dg_min_f32(float a, float b) { return (a < b || a != a) ? a : b; }\n"
    "static inline float dg_max_f32(float a, float b) { return (a > b || a != a) ? a : b; }\n"
    "static inline double dg_min_f64(double a, double b) { return (a < b || a != a) ? a : b; }\n"
    "static inline double dg_max_f64(double a, double b) { return (a > b || a != a) ? a : b; }\n"
    "static inline int64_t dg_f2i(double x, int64_t lo, int64_t hi) {\n"
    "  if (x != x) return 0;\n"
    "  if (x <= (double)lo) return lo;\n"
    "  if (x >= (double)hi) return hi;\n"
    "  return (int64_t)x;\n"
    "}\n"
    "static inline float dg_rsqrtf(float x) { return 1.0f / sqrtf(x); }\n"
    "static inline double dg_rsqrt(double x) { return 1.0 / sqrt(x); }\n"
    "static inline float dg_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
    "static inline double dg_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }\n";

const dg_lang codegen_lang_c = {
    .name = "c",
    .kernel_prefix = "",
    .helper_prefix = "static inline ",
    .restrict_kw = "restrict",
    .barrier = NULL,
    .scope_prefix = {""},
    .thread_index = {NULL},
    .half_type = "uint16_t",
    .half_to_float = "dg_h2f",
    .float_to_half = "dg_f2h",
    .round_half = "dg_rh",
    .float4_type = NULL,
    .half2_type = NULL,
    .math_f16 = {NULL},
    .math_f32 = CODEGEN_MATH_F32,
    .math_f64 = CODEGEN_MATH_F64,
    .preamble = c_preamble,
    .floordiv_fn = "dg_floordiv",
    .floormod_fn = "dg_floormod",
    .min_fn = "dg_min",
    .max_fn = "dg_max",
    .float_to_int_fn = "dg_f2i",
    .inf_literal = "INFINITY",
    .nan_literal = "NAN",
    .max_stack_bytes = 64 * 1024,
    .malloc_fn = "malloc",
    .free_fn = "free",
    .emulate_threads = true,
    .align16 = "_Alignas(16) ",
};

/* Every math function needs an f32 and an f64 name in every table. */
static bool lang_complete(const dg_lang *l) {
  for (int i = 0; i < DG_MATH_COUNT; i++)
    if (!l->math_f32[i] || !l->math_f64[i]) return false;
  return true;
}

const dg_lang *codegen_lang_find(const char *name) {
  static const dg_lang *const tables[] = {&codegen_lang_c, &codegen_lang_cuda};
  for (size_t i = 0; i < DG_ARRAY_LEN(tables); i++)
    if (strcmp(tables[i]->name, name) == 0) {
      DG_ASSERT(lang_complete(tables[i]));
      return tables[i];
    }
  return NULL;
}
