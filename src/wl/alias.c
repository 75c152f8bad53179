/* alias.c: MetaSchedule's test workloads (te_workload.py's CONFIGS) as
 * aliases of family specs: C1D C2D C3D CAP DEP DIL GMM GRP T2D NRM SFM CBR
 * TBG, each with configs 0..3, all float32. An alias is only a name for a
 * spec: it canonicalises to the family spec and builds the same kernel.
 * Parameters are copied from the CONFIGS tuples (shown beside each row);
 * defaults that TVM leaves implicit (dilation 1, groups 1) are written out.
 */
#include <string.h>

#include "wl/wl_impl.h"

#define NCFG 4

static const struct {
  const char *name;
  const char *cfg[NCFG];
} aliases[] = {
    /* conv1d_nlc (N, L, CI, CO, kernel, stride, padding) */
    {"C1D",
     {"conv1d_nlc:n=1,l=256,ci=64,co=128,kernel=3,stride=2,pad=1",
      "conv1d_nlc:n=1,l=128,ci=128,co=256,kernel=1,stride=2,pad=0",
      "conv1d_nlc:n=1,l=64,ci=256,co=256,kernel=5,stride=1,pad=2",
      "conv1d_nlc:n=1,l=32,ci=512,co=512,kernel=3,stride=1,pad=1"}},
    /* conv2d_nhwc (N, H, W, CI, CO, kernel, stride, padding) */
    {"C2D",
     {"conv2d_nhwc:n=1,h=224,w=224,ci=3,co=64,kernel=7,stride=2,pad=3",
      "conv2d_nhwc:n=1,h=56,w=56,ci=64,co=64,kernel=1,stride=1,pad=0",
      "conv2d_nhwc:n=1,h=14,w=14,ci=256,co=256,kernel=3,stride=1,pad=1",
      "conv2d_nhwc:n=1,h=7,w=7,ci=512,co=512,kernel=3,stride=1,pad=1"}},
    /* conv3d_ndhwc (N, D, H, W, CI, CO, kernel, stride, padding) */
    {"C3D",
     {"conv3d_ndhwc:n=1,d=16,h=224,w=224,ci=3,co=64,kernel=7,stride=2,pad=3",
      "conv3d_ndhwc:n=1,d=16,h=56,w=56,ci=64,co=64,kernel=1,stride=1,pad=0",
      "conv3d_ndhwc:n=1,d=16,h=14,w=14,ci=256,co=256,kernel=3,stride=1,pad=1",
      "conv3d_ndhwc:n=1,d=16,h=7,w=7,ci=512,co=512,kernel=3,stride=1,pad=1"}},
    /* conv2d_capsule_nhwijc (N, H, W, CI, CO, kernel, stride, padding), capsule 4 */
    {"CAP",
     {"conv2d_capsule_nhwijc:n=1,h=16,w=16,ci=32,co=32,kernel=3,stride=2,pad=1",
      "conv2d_capsule_nhwijc:n=1,h=8,w=8,ci=32,co=32,kernel=3,stride=1,pad=1",
      "conv2d_capsule_nhwijc:n=1,h=16,w=16,ci=8,co=16,kernel=3,stride=2,pad=1",
      "conv2d_capsule_nhwijc:n=1,h=8,w=8,ci=16,co=16,kernel=3,stride=1,pad=1"}},
    /* depthwise_conv2d_nhwc (N, H, W, C, kernel, stride, padding) */
    {"DEP",
     {"depthwise_conv2d_nhwc:n=1,h=112,w=112,c=32,kernel=3,stride=1,pad=1",
      "depthwise_conv2d_nhwc:n=1,h=112,w=112,c=64,kernel=3,stride=2,pad=1",
      "depthwise_conv2d_nhwc:n=1,h=14,w=14,c=512,kernel=3,stride=2,pad=1",
      "depthwise_conv2d_nhwc:n=1,h=7,w=7,c=1024,kernel=3,stride=1,pad=1"}},
    /* conv2d_nhwc with dilation 2 */
    {"DIL",
     {"conv2d_nhwc:n=1,h=224,w=224,ci=3,co=64,kernel=7,stride=2,pad=3,dilation=2",
      "conv2d_nhwc:n=1,h=56,w=56,ci=64,co=64,kernel=1,stride=1,pad=0,dilation=2",
      "conv2d_nhwc:n=1,h=14,w=14,ci=256,co=256,kernel=3,stride=1,pad=1,dilation=2",
      "conv2d_nhwc:n=1,h=7,w=7,ci=512,co=512,kernel=3,stride=1,pad=1,dilation=2"}},
    /* batch_matmul_nkkm (B, N, M, K) */
    {"GMM",
     {"batch_matmul:b=1,n=128,m=128,k=128", "batch_matmul:b=1,n=512,m=32,k=512",
      "batch_matmul:b=1,n=512,m=512,k=512", "batch_matmul:b=1,n=1024,m=1024,k=1024"}},
    /* conv2d_nhwc with groups 4 */
    {"GRP",
     {"conv2d_nhwc:n=1,h=56,w=56,ci=64,co=128,kernel=3,stride=2,pad=1,dilation=1,groups=4",
      "conv2d_nhwc:n=1,h=56,w=56,ci=64,co=64,kernel=1,stride=1,pad=0,dilation=1,groups=4",
      "conv2d_nhwc:n=1,h=14,w=14,ci=256,co=256,kernel=3,stride=1,pad=1,dilation=1,groups=4",
      "conv2d_nhwc:n=1,h=7,w=7,ci=512,co=512,kernel=3,stride=1,pad=1,dilation=1,groups=4"}},
    /* conv2d_transpose_nhwc (N, H, W, CI, CO, kernel, stride, padding) */
    {"T2D",
     {"conv2d_transpose_nhwc:n=1,h=4,w=4,ci=512,co=256,kernel=4,stride=2,pad=1",
      "conv2d_transpose_nhwc:n=1,h=8,w=8,ci=256,co=128,kernel=4,stride=2,pad=1",
      "conv2d_transpose_nhwc:n=1,h=16,w=16,ci=128,co=64,kernel=4,stride=2,pad=1",
      "conv2d_transpose_nhwc:n=1,h=32,w=32,ci=64,co=3,kernel=4,stride=2,pad=1"}},
    /* norm_bmn (B, M, N) */
    {"NRM",
     {"norm_bmn:b=1,m=256,n=256", "norm_bmn:b=1,m=512,n=512", "norm_bmn:b=1,m=1024,n=1024",
      "norm_bmn:b=1,m=4096,n=1024"}},
    /* softmax_mn (M, N) */
    {"SFM",
     {"softmax:m=256,n=256", "softmax:m=512,n=512", "softmax:m=1024,n=1024",
      "softmax:m=2048,n=2048"}},
    /* conv2d_nhwc_bn_relu (N, H, W, CI, CO, kernel, strides, padding) */
    {"CBR",
     {"conv2d_bias_bn_relu:n=1,h=224,w=224,ci=3,co=64,kernel=7,stride=2,pad=3",
      "conv2d_bias_bn_relu:n=1,h=56,w=56,ci=64,co=128,kernel=3,stride=2,pad=1",
      "conv2d_bias_bn_relu:n=1,h=28,w=28,ci=128,co=256,kernel=1,stride=2,pad=0",
      "conv2d_bias_bn_relu:n=1,h=7,w=7,ci=512,co=512,kernel=3,stride=1,pad=1"}},
    /* transpose_batch_matmul (batch, seq_len, n_head, n_dim) */
    {"TBG",
     {"transpose_batch_matmul:batch=1,seq=128,heads=12,dim=64",
      "transpose_batch_matmul:batch=1,seq=128,heads=16,dim=64",
      "transpose_batch_matmul:batch=1,seq=64,heads=12,dim=128",
      "transpose_batch_matmul:batch=1,seq=128,heads=12,dim=128"}},
};

int wl_alias_count(void) { return (int)DG_ARRAY_LEN(aliases); }

const char *wl_alias_name(int i) {
  DG_ASSERT(i >= 0 && i < wl_alias_count());
  return aliases[i].name;
}

const char *wl_alias_spec(const char *name, size_t n, int idx, bool *bad_idx) {
  *bad_idx = false;
  for (size_t i = 0; i < DG_ARRAY_LEN(aliases); i++) {
    if (strlen(aliases[i].name) != n || memcmp(aliases[i].name, name, n) != 0) continue;
    if (idx < 0 || idx >= NCFG) {
      *bad_idx = true;
      return NULL;
    }
    return aliases[i].cfg[idx];
  }
  return NULL;
}
