/* model_view.cuh: what the KV-cache decoder (decode.cu) reads of a CUDA
 * training model (model.cu): its config, device weights (the fp32 master
 * copy and the bf16 copy the matmuls use, both in the C layout), the RoPE
 * tables and its stream. The pointers stay valid for the model's life and
 * see every update, so generation always uses the current weights.
 */
#ifndef DRAGON_NN_CUDA_MODEL_VIEW_CUH
#define DRAGON_NN_CUDA_MODEL_VIEW_CUH

#include "common.cuh"

typedef struct {
  const nn_config *cfg;
  const float *params;              /* fp32, C layout */
  const bf16 *params_bf;            /* bf16 copy, same layout */
  size_t param_off[NN_PARAM_COUNT]; /* element offset of each tensor */
  const float *rope_cos, *rope_sin; /* (max_seq_len, HD/2) */
  cudaStream_t stream;              /* the model's; work on it is ordered with training */
} nc_model_view;

/* Defined at the end of model.cu. */
void nc_model_view_get(const nn_cuda_model *m, nc_model_view *v);

#endif
