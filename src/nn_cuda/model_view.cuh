/* model_view.cuh: the CUDA model's parameter layout on the device, and what
 * the KV-cache decoder (decode.cu) reads of a training model (model.cu).
 *
 * The device layout is a permutation of the C reference's (where a
 * tensor's layers are contiguous): the decaying matrices first, wte and
 * wlm, then per layer [wq wk wv | wo | w1 w3 | w2], then the norm gains
 * (ln1w (L, C), ln2w (L, C), lnfw). A layer's wq, wk, wv thus form one
 * (QD + 2 KVD, C) matrix and its w1, w3 one (2F, C) matrix, so each group
 * of projections is one matmul (forward, input gradient and weight
 * gradient alike), and AdamW's weight decay covers one prefix. Parameters,
 * gradients, AdamW state and the bf16 copy share the layout; copies to and
 * from the C reference permute.
 */
#ifndef DRAGON_NN_CUDA_MODEL_VIEW_CUH
#define DRAGON_NN_CUDA_MODEL_VIEW_CUH

#include "common.cuh"

typedef struct {
  size_t off[NN_PARAM_COUNT];   /* element offset of layer 0 of each tensor */
  size_t stride[NN_PARAM_COUNT]; /* elements from one layer to the next */
  size_t size[NN_PARAM_COUNT];  /* elements of one layer (all, if not per layer) */
  size_t n_decay;               /* the decaying tensors are [0, n_decay) */
  size_t layer_off, layer_block; /* layer l's [wq wk wv | wo | w1 w3 | w2] block starts at
                                    layer_off + l * layer_block */
  size_t total;
} nc_layout;

void nc_layout_make(const nn_config *cfg, nc_layout *lay);

/* Element offset of layer l of tensor id (l = 0 for the global ones). */
static inline size_t nc_at(const nc_layout *lay, nn_param_id id, int l) {
  return lay->off[id] + (size_t)l * lay->stride[id];
}

typedef struct {
  const nn_config *cfg;
  const float *params;              /* fp32, device layout */
  const bf16 *params_bf;            /* bf16 copy, same layout */
  nc_layout layout;
  const float *rope_cos, *rope_sin; /* (max_seq_len, HD/2) */
  cudaStream_t stream;              /* the model's; work on it is ordered with training */
} nc_model_view;

/* Defined at the end of model.cu. */
void nc_model_view_get(const nn_cuda_model *m, nc_model_view *v);

#endif
