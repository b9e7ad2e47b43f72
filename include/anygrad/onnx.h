/* ONNX export of a forward pass: a graph is built from anygrad's modules
 * (each layer appends its ONNX nodes and its weights as f32 initializers)
 * and written as one ONNX model file, opset 17, through protobuf-c
 * (docs/export.md "ONNX", docs/design/onnx.md). Built only when protobuf-c
 * was found at configure time (AG_ONNX); otherwise ag_onnx_create fails
 * with AG_ERR_UNSUPPORTED and says so.
 *
 * Values of the graph are small non-negative ints returned by the
 * functions below; a function given a negative value (the result of an
 * earlier failure) returns -1 without overwriting the first error, so a
 * chain of layers is checked once, at ag_onnx_save. The first error is kept
 * in the graph: every later call returns -1 and ag_onnx_save returns it.
 *
 * Ownership: a graph is owned by the caller (ag_onnx_free). Weights are
 * copied to the host when a layer is added (a host sync); the modules are
 * only read. Errors: -1 or a status, with the error set (ag_last_error). */
#ifndef ANYGRAD_ONNX_H
#define ANYGRAD_ONNX_H

#include <stdbool.h>
#include <stdint.h>

#include "anygrad/llama.h"
#include "anygrad/nn.h"
#include "anygrad/ops.h"
#include "anygrad/sequential.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ag_onnx ag_onnx;

/* The ONNX opset the graphs import (17: LayerNormalization exists). */
#define AG_ONNX_OPSET 17

/* Whether this build of anygrad can write ONNX files. */
AG_API bool ag_onnx_available(void);

/* A new empty graph named name (NULL: "anygrad"), owned by the caller.
 * NULL with AG_ERR_UNSUPPORTED when anygrad was built without ONNX
 * (protobuf-c absent at configure time), AG_ERR_OOM. */
AG_API ag_onnx *ag_onnx_create(const char *name);

/* Release a graph; NULL is ignored. */
AG_API void ag_onnx_free(ag_onnx *g);

/* The first error met while building g (AG_OK none; AG_ERR_INVALID for
 * NULL g). */
AG_API ag_status ag_onnx_status(const ag_onnx *g);

/* A graph input named name of dtype dt (AG_F32, AG_I64 or AG_I32) and
 * ndim dims; dims[i] < 0 makes dimension i dynamic, named dim_names[i]
 * ("batch", "seq"). Returns its value, or -1: AG_ERR_INVALID (NULL or
 * empty name, a name used before, NULL dims with ndim > 0, ndim outside
 * 0..AG_MAX_DIMS, a dynamic dimension without a name), AG_ERR_DTYPE. */
AG_API int ag_onnx_input(ag_onnx *g, const char *name, ag_dtype dt, int ndim, const int64_t *dims,
                         const char *const *dim_names);

/* Make value v a graph output named name, of dtype dt with ndim dims
 * (as ag_onnx_input). AG_ERR_INVALID for NULL g, a negative v (the
 * pending error is returned), a bad name or dims. */
AG_API ag_status ag_onnx_output(ag_onnx *g, int v, const char *name, ag_dtype dt, int ndim,
                                const int64_t *dims, const char *const *dim_names);

/* ---- layers: each reads its module's weights (named "<prefix>weight",
 * "<prefix>bias", ... as the module's params; NULL prefix: "") and returns
 * the value of its output, or -1 with the error set. A weight shared by
 * two layers (tied embeddings) is one initializer. ---- */

/* x [..., in] -> [..., out]: MatMul with the transposed weight, Add bias. */
AG_API int ag_onnx_linear(ag_onnx *g, const ag_linear *m, const char *prefix, int x);
/* Integer indices of any shape -> [..., dim]: Gather. */
AG_API int ag_onnx_embedding(ag_onnx *g, const ag_embedding_layer *m, const char *prefix, int idx);
/* NCHW Conv with the layer's stride, padding, dilation and groups. */
AG_API int ag_onnx_conv2d(ag_onnx *g, const ag_conv2d_layer *m, const char *prefix, int x);
/* Evaluation-mode batch norm (the running statistics): BatchNormalization. */
AG_API int ag_onnx_batch_norm2d(ag_onnx *g, const ag_batch_norm2d *m, const char *prefix, int x);
/* LayerNormalization over the last dim. */
AG_API int ag_onnx_layer_norm(ag_onnx *g, const ag_layer_norm_layer *m, const char *prefix, int x);
/* ag_rms_norm(x, weight, eps) over the last dim, composed (ReduceMean of
 * x*x, Add eps, Sqrt, Reciprocal, Mul); weight named name (NULL weight:
 * ones, no initializer). AG_ERR_INVALID for an eps that is negative or not
 * finite. */
AG_API int ag_onnx_rms_norm(ag_onnx *g, ag_tensor *weight, const char *name, double eps, int x);
/* MaxPool over NCHW windows (ag_max_pool2d's parameters; stride 0: the
 * kernel). AG_ERR_INVALID for NULL p or a kernel < 1. */
AG_API int ag_onnx_max_pool2d(ag_onnx *g, const ag_pool2d_params *p, int x);
/* [N, ...] -> [N, prod(...)]: Flatten at axis 1. */
AG_API int ag_onnx_flatten(ag_onnx *g, int x);
/* The elementwise op of anygrad's op table named op ("tanh", "exp",
 * "gelu_erf", ...; the name of ag_<op>). AG_ERR_UNSUPPORTED naming the op
 * for one with no ONNX form here ("frac", "expm1", ...), AG_ERR_INVALID for
 * NULL op. */
AG_API int ag_onnx_unary(ag_onnx *g, const char *op, int x);
/* ag_activation_forward's act (AG_ACT_NONE: x itself). */
AG_API int ag_onnx_activation(ag_onnx *g, ag_activation act, int x);
/* Every layer of a model in evaluation mode (dropout is the identity,
 * batch norm uses the running statistics), parameters named as m->params.
 * AG_ERR_STATE for a model in training mode (its forward is random or
 * updates statistics), AG_ERR_INVALID for NULL m. */
AG_API int ag_onnx_sequential(ag_onnx *g, const ag_sequential *m, int x);
/* Linear, act, ..., Linear as ag_mlp_forward. */
AG_API int ag_onnx_mlp(ag_onnx *g, const ag_mlp *m, int x);
/* The logits [B, T, vocab] of ag_llama_forward for integer ids [B, T]
 * (B and T may be dynamic; T <= max_seq_len): Gather, per layer RMSNorm,
 * q/k/v MatMul, RoPE as Mul/Add of the sliced cos/sin tables with
 * rotate_half (Slice, Neg, Concat), grouped-query attention as MatMul over
 * [B, kv_heads, heads/kv_heads, T, head_dim] with a causal mask of -inf
 * above the diagonal and Softmax, the SwiGLU MLP, the final RMSNorm and the
 * (tied or untied) head. Weights under m->params' names. AG_ERR_INVALID for
 * NULL m. */
AG_API int ag_onnx_llama(ag_onnx *g, const ag_llama *m, int ids);

/* Write g as an ONNX model (IR 8, opset AG_ONNX_OPSET, producer
 * "anygrad") to path, atomically (ag_output_open: on any failure path keeps
 * its old content and no temp file is left). Errors: g's first error if
 * any, AG_ERR_INVALID (NULL g or path, a graph without outputs),
 * AG_ERR_UNSUPPORTED (a model over protobuf's 2 GiB), AG_ERR_IO. */
AG_API ag_status ag_onnx_save(ag_onnx *g, const char *path);

#ifdef __cplusplus
}
#endif
#endif
