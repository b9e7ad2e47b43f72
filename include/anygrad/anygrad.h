/* anygrad: the umbrella header. Include this, link -lanygrad.
 *
 * Example (scripts/doc_check.py compiles it):
 * ```c
 * #include <stdio.h>
 * #include <anygrad/anygrad.h>
 *
 * int main(void) {
 *   ag_scope_begin();               // the tensors below go with the scope
 *   const int64_t shape[1] = {3};
 *   ag_tensor *x = ag_full(ag_device_best(), AG_F32, 1, shape, 2.0);
 *   double s = ag_item(ag_sum(ag_mul(x, x), 0, NULL, false));
 *   if (ag_last_status() != AG_OK) fprintf(stderr, "%s\n", ag_last_error());
 *   else printf("%g\n", s);        // 12
 *   ag_scope_end();
 *   return ag_last_status() == AG_OK ? 0 : 1;
 * }
 * ```
 */
#ifndef ANYGRAD_H
#define ANYGRAD_H

#include "anygrad/status.h"
#include "anygrad/version.h"
/* Older spellings of the version macros (version.h is the source). */
#define ANYGRAD_VERSION_MAJOR AG_VERSION_MAJOR
#define ANYGRAD_VERSION_MINOR AG_VERSION_MINOR
#define ANYGRAD_VERSION_PATCH AG_VERSION_PATCH
#define ANYGRAD_VERSION_STRING AG_VERSION_STRING

#include "anygrad/device.h"
#include "anygrad/tensor.h"
#include "anygrad/ops.h"
#include "anygrad/alloc.h"
#include "anygrad/diag.h"
#include "anygrad/amp.h"
#include "anygrad/loader.h"
#include "anygrad/threads.h"
#include "anygrad/cpu.h"
#include "anygrad/report.h"
#include "anygrad/idx.h"
#include "anygrad/autograd.h"
#include "anygrad/nn.h"
#include "anygrad/llama.h"
#include "anygrad/tokenizer.h"
#include "anygrad/pretrained.h"
#include "anygrad/gguf.h"
#include "anygrad/optim.h"
#include "anygrad/serialize.h"
#include "anygrad/onnx.h"
#include "anygrad/checks.h"
#include "anygrad/interop.h"
#include "anygrad/dist.h"
#include "anygrad/ddp.h"

#endif
