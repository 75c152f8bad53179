/* prompt.c: the layout of the model's input, written in this one place
 * for every caller: training examples, sampling, `dragon optimize`, eval
 * and GRPO all put a kernel (and a prior graph) in front of the model the
 * same way, so the model is judged on what it was trained on.
 *
 *   <|kernel|> kernel text [<|prior|> prior graph] <|graph|>
 *
 * then, for a training example, the target graph and <|end|>. The texts
 * are encoded as they are (byte-level BPE, lossless); only the specials
 * come from tok_special. */
#include <string.h>

#include "dragon/train.h"

static bool put_special(tok_tokenizer *tok, const char *name, tok_ids *out, dg_status *st) {
  int32_t id = tok_special(tok, name);
  if (id < 0) return dg_fail(st, DG_ERR_INVALID, "the tokenizer has no %s token", name);
  DG_VEC_PUSH(out, id);
  return true;
}

bool train_prompt_encode(tok_tokenizer *tok, const char *kernel, const char *prior, tok_ids *out,
                         dg_status *st) {
  dg_status_ok(st);
  if (!kernel) return dg_fail(st, DG_ERR_INVALID, "a prompt needs the kernel text");
  if (!put_special(tok, TOK_KERNEL, out, st) || !tok_encode(tok, kernel, strlen(kernel), out, st))
    return false;
  if (prior && (!put_special(tok, TOK_PRIOR, out, st) ||
                !tok_encode(tok, prior, strlen(prior), out, st)))
    return false;
  return put_special(tok, TOK_GRAPH, out, st);
}
