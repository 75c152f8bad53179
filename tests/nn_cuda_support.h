/* nn_cuda_support.h: what the CUDA model's tests share: skipping where
 * there is no GPU, and comparing a GPU tensor with the C reference's under
 * a bf16 tolerance. Declared only in CUDA builds. */
#ifndef DRAGON_TEST_NN_CUDA_SUPPORT_H
#define DRAGON_TEST_NN_CUDA_SUPPORT_H

#include <stdbool.h>
#include <stddef.h>

#ifdef DG_HAVE_CUDA

/* A GPU is here; otherwise marks the test skipped, with why. */
bool nt_gpu_here(void);

/* Elementwise |a - b| <= thr * max|b| + rel * |b| and, over the tensor,
 * ||a - b|| / ||b|| <= l2. */
typedef struct {
  double thr, rel, l2;
} nt_tolerance;

/* llm.c's bf16 epsilon, the relative term of the tolerances. */
#define NT_BF16_REL 0.079

/* Prints the worst ratio to the bound and the relative L2; on failure
 * reports the worst element (NaN counts as worst) as a test failure. */
bool nt_compare(const char *what, const float *a, const float *b, size_t n, nt_tolerance t);

/* Runs a call that takes a dg_status (passed as ST); on failure reports
 * the call and its message as a test failure and jumps to the test's
 * `done:` label, where it frees what it holds. */
#define CHECK_GPU(call)                                                       \
  do {                                                                        \
    dg_status st_;                                                            \
    dg_status_ok(&st_);                                                       \
    if (!(call)) {                                                            \
      dg_test_fail(__FILE__, __LINE__, "%s: %s", #call, st_.msg);             \
      goto done;                                                              \
    }                                                                         \
  } while (0)
#define ST (&st_)

#endif
#endif
