/* The data-parallel tests' shared job: the charlm MLP, small enough for
 * 50 steps in a second, with a fixed seed so every replica and the
 * one-device reference start from the same weights. */
#ifndef AG_TESTS_DDP_CASE_H
#define AG_TESTS_DDP_CASE_H

#include "charlm.h"

/* words: the word list (NULL: charlm's default). */
static inline charlm_options ddp_small_charlm(const char *words) {
  charlm_options o = charlm_defaults(CHARLM_MLP);
  if (words) o.words_path = words;
  o.device = AG_CPU;
  o.quiet = true;
  o.samples = 0;
  o.eval_batches = 2;
  o.out = NULL;
  o.steps = 50;
  o.batch = 48;
  o.hidden = 64;
  o.emb = 8;
  o.warmup = 5;
  o.log_every = 50;
  o.seed = 5;
  o.seed_set = true;
  return o;
}

#endif
