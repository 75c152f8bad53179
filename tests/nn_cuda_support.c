/* nn_cuda_support.c: see nn_cuda_support.h. */
#include "nn_cuda_support.h"

#ifdef DG_HAVE_CUDA
#include <math.h>
#include <stdio.h>

#include "dragon/nn_cuda.h"
#include "test.h"

bool nt_gpu_here(void) {
  dg_status st;
  dg_status_ok(&st);
  if (nn_cuda_device_count(&st) > 0) return true;
  dg_test_skip("no GPU: %s", st.msg);
  return false;
}

bool nt_compare(const char *what, const float *a, const float *b, size_t n, nt_tolerance t) {
  double maxb = 0, num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    maxb = fmax(maxb, fabs(b[i]));
    num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    den += (double)b[i] * b[i];
  }
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    double bound = t.thr * maxb + t.rel * fabs(b[i]);
    double d = fabs((double)a[i] - b[i]);
    double r = bound > 0 ? d / bound : (d > 0 ? INFINITY : 0);
    if (!(r <= worst)) worst = r, at = i; /* NaN counts as worst */
  }
  double l2 = den > 0 ? sqrt(num / den) : sqrt(num);
  bool ok = worst <= 1.0 && l2 <= t.l2 && maxb > 0;
  printf("  %-12s max|ref| %-10.3g worst/bound %-8.3f rel L2 %-9.2e (<= %.0e)%s\n", what, maxb,
         worst, l2, t.l2, ok ? "" : "  <-- FAILS");
  if (!ok)
    dg_test_fail(__FILE__, __LINE__, "%s: element %zu: gpu %.6g vs c %.6g; rel L2 %.3g%s", what, at,
                 (double)a[at], (double)b[at], l2, maxb > 0 ? "" : " (reference all zero)");
  return ok;
}
#endif
