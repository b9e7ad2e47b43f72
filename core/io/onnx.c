/* ONNX export (anygrad/onnx.h): a graph built layer by layer into the
 * protobuf-c structs generated from third_party/onnx/onnx.proto, packed by
 * protobuf-c and written through ag_output. Every string and struct of a
 * graph lives in one arena freed with it. Without protobuf-c (AG_ONNX off or
 * not found) the same API refuses with AG_ERR_UNSUPPORTED. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/checks.h"
#include "anygrad/onnx.h"
#include "anygrad/status.h"
#include "anygrad/version.h"

#ifndef AG_HAVE_ONNX

bool ag_onnx_available(void) { return false; }

static ag_status no_onnx(void) {
  return ag_error_set(AG_ERR_UNSUPPORTED,
                      "ag_onnx: anygrad was built without ONNX export (AG_ONNX=OFF, or protobuf-c not found at "
                      "configure time: install libprotobuf-c-dev and protobuf-c-compiler, configure with "
                      "-DAG_ONNX=ON)");
}

ag_onnx *ag_onnx_create(const char *name) {
  (void)name;
  no_onnx();
  return NULL;
}
void ag_onnx_free(ag_onnx *g) { (void)g; }
ag_status ag_onnx_status(const ag_onnx *g) { return g ? AG_OK : no_onnx(); }
int ag_onnx_input(ag_onnx *g, const char *name, ag_dtype dt, int ndim, const int64_t *dims,
                  const char *const *dim_names) {
  no_onnx();
  return -1;
}
ag_status ag_onnx_output(ag_onnx *g, int v, const char *name, ag_dtype dt, int ndim, const int64_t *dims,
                         const char *const *dim_names) {
  return no_onnx();
}
#define AG_ONNX_STUB(decl) \
  decl {                   \
    no_onnx();             \
    return -1;             \
  }
AG_ONNX_STUB(int ag_onnx_linear(ag_onnx *g, const ag_linear *m, const char *prefix, int x))
AG_ONNX_STUB(int ag_onnx_embedding(ag_onnx *g, const ag_embedding_layer *m, const char *prefix, int idx))
AG_ONNX_STUB(int ag_onnx_conv2d(ag_onnx *g, const ag_conv2d_layer *m, const char *prefix, int x))
AG_ONNX_STUB(int ag_onnx_batch_norm2d(ag_onnx *g, const ag_batch_norm2d *m, const char *prefix, int x))
AG_ONNX_STUB(int ag_onnx_layer_norm(ag_onnx *g, const ag_layer_norm_layer *m, const char *prefix, int x))
AG_ONNX_STUB(int ag_onnx_rms_norm(ag_onnx *g, ag_tensor *weight, const char *name, double eps, int x))
AG_ONNX_STUB(int ag_onnx_max_pool2d(ag_onnx *g, const ag_pool2d_params *p, int x))
AG_ONNX_STUB(int ag_onnx_flatten(ag_onnx *g, int x))
AG_ONNX_STUB(int ag_onnx_unary(ag_onnx *g, const char *op, int x))
AG_ONNX_STUB(int ag_onnx_activation(ag_onnx *g, ag_activation act, int x))
AG_ONNX_STUB(int ag_onnx_mlp(ag_onnx *g, const ag_mlp *m, int x))
AG_ONNX_STUB(int ag_onnx_llama(ag_onnx *g, const ag_llama *m, int ids))
ag_status ag_onnx_save(ag_onnx *g, const char *path) { return no_onnx(); }

#else

#include "onnx/onnx.pb-c.h"

bool ag_onnx_available(void) { return true; }

/* A growable array of pointers. */
typedef struct ptrs {
  void **p;
  size_t n, cap;
} ptrs;

static bool ptrs_push(ptrs *a, void *v) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 16;
    void **p = realloc(a->p, cap * sizeof *p);
    if (!p) return false;
    a->p = p;
    a->cap = cap;
  }
  a->p[a->n++] = v;
  return true;
}

typedef struct shared_init {
  const ag_tensor *t;
  int value;
} shared_init;

struct ag_onnx {
  ag_status err;
  ptrs arena;            /* every allocation of the graph */
  ptrs names;            /* value id -> name (arena strings) */
  ptrs nodes, inits, inputs, outputs;
  shared_init *shared;   /* initializers made from tensors, for tying */
  size_t n_shared, cap_shared;
  int counter;           /* for unique node and value names */
  char *graph_name;
};

static ag_status fail(ag_onnx *g, ag_status s, const char *fmt, const char *a, const char *b) {
  ag_error_set(s, fmt, a, b);
  if (g && g->err == AG_OK) g->err = s;
  return s;
}

static void *ar_alloc(ag_onnx *g, size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p || !ptrs_push(&g->arena, p)) {
    free(p);
    fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
    return NULL;
  }
  return p;
}

static char *ar_str(ag_onnx *g, const char *s) {
  size_t n = strlen(s) + 1;
  char *p = ar_alloc(g, n);
  if (p) memcpy(p, s, n);
  return p;
}

/* Whether g can take another call: a live graph, no earlier error, and
 * every input value valid. */
static bool ready(ag_onnx *g, int n, const int *v) {
  if (!g) {
    if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "ag_onnx: NULL graph");
    return false;
  }
  if (g->err != AG_OK) return false;
  for (int i = 0; i < n; i++)
    if (v[i] < 0 || (size_t)v[i] >= g->names.n) {
      if (ag_last_status() == AG_OK || v[i] >= 0)
        fail(g, AG_ERR_INVALID, "ag_onnx: value %s is not a value of this graph%s", v[i] < 0 ? "-1" : "id", "");
      else
        g->err = ag_last_status();
      return false;
    }
  return true;
}

/* A new value named after what makes it. */
static int new_value(ag_onnx *g, const char *hint) {
  char buf[160];
  snprintf(buf, sizeof buf, "_%d_%s", g->counter++, hint); /* "_12_MatMul": no parameter is named so */
  char *s = ar_str(g, buf);
  if (!s || !ptrs_push(&g->names, s)) {
    if (s) fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
    return -1;
  }
  return (int)g->names.n - 1;
}

static int named_value(ag_onnx *g, const char *name) {
  for (size_t i = 0; i < g->names.n; i++)
    if (!strcmp(g->names.p[i], name)) {
      fail(g, AG_ERR_INVALID, "ag_onnx: the name '%s' is used twice in the graph%s", name, "");
      return -1;
    }
  char *s = ar_str(g, name);
  if (!s || !ptrs_push(&g->names, s)) {
    if (s) fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
    return -1;
  }
  return (int)g->names.n - 1;
}

static const char *vname(const ag_onnx *g, int v) { return g->names.p[v]; }

/* ---- attributes ---- */

static Onnx__AttributeProto *attr_new(ag_onnx *g, const char *name, Onnx__AttributeProto__AttributeType t) {
  Onnx__AttributeProto *a = ar_alloc(g, sizeof *a);
  if (!a) return NULL;
  onnx__attribute_proto__init(a);
  a->name = ar_str(g, name);
  a->has_type = 1;
  a->type = t;
  return a->name ? a : NULL;
}

static Onnx__AttributeProto *attr_i(ag_onnx *g, const char *name, int64_t v) {
  Onnx__AttributeProto *a = attr_new(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
  if (a) {
    a->has_i = 1;
    a->i = v;
  }
  return a;
}

static Onnx__AttributeProto *attr_f(ag_onnx *g, const char *name, double v) {
  Onnx__AttributeProto *a = attr_new(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
  if (a) {
    a->has_f = 1;
    a->f = (float)v;
  }
  return a;
}

static Onnx__AttributeProto *attr_ints(ag_onnx *g, const char *name, int n, const int64_t *v) {
  Onnx__AttributeProto *a = attr_new(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
  if (!a) return NULL;
  a->ints = ar_alloc(g, sizeof(int64_t) * (size_t)n);
  if (!a->ints) return NULL;
  memcpy(a->ints, v, sizeof(int64_t) * (size_t)n);
  a->n_ints = (size_t)n;
  return a;
}

/* A one-element f32 tensor attribute (ConstantOfShape's value). */
static Onnx__AttributeProto *attr_f32_tensor(ag_onnx *g, const char *name, float v) {
  Onnx__AttributeProto *a = attr_new(g, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
  Onnx__TensorProto *t = a ? ar_alloc(g, sizeof *t) : NULL;
  int64_t *d = t ? ar_alloc(g, sizeof *d) : NULL;
  uint8_t *raw = d ? ar_alloc(g, sizeof v) : NULL;
  if (!raw) return NULL;
  onnx__tensor_proto__init(t);
  d[0] = 1;
  memcpy(raw, &v, sizeof v);
  t->n_dims = 1;
  t->dims = d;
  t->has_data_type = 1;
  t->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  t->has_raw_data = 1;
  t->raw_data.len = sizeof v;
  t->raw_data.data = raw;
  a->t = t;
  return a;
}

/* One node op_type(in...) -> a new value; attrs may hold NULLs only after
 * an allocation failure (the error is then set). */
static int node(ag_onnx *g, const char *op, int n_in, const int *in, int n_attr, Onnx__AttributeProto **attrs) {
  if (!ready(g, n_in, in)) return -1;
  for (int i = 0; i < n_attr; i++)
    if (!attrs[i]) return -1;
  int out = new_value(g, op);
  if (out < 0) return -1;
  Onnx__NodeProto *nd = ar_alloc(g, sizeof *nd);
  char **ins = ar_alloc(g, sizeof(char *) * (size_t)n_in);
  char **outs = ar_alloc(g, sizeof(char *));
  Onnx__AttributeProto **at = ar_alloc(g, sizeof *at * (size_t)n_attr);
  if (!nd || !ins || !outs || !at) return -1;
  onnx__node_proto__init(nd);
  for (int i = 0; i < n_in; i++) ins[i] = (char *)vname(g, in[i]);
  outs[0] = (char *)vname(g, out);
  for (int i = 0; i < n_attr; i++) at[i] = attrs[i];
  nd->n_input = (size_t)n_in;
  nd->input = ins;
  nd->n_output = 1;
  nd->output = outs;
  nd->name = outs[0];
  nd->op_type = ar_str(g, op);
  nd->n_attribute = (size_t)n_attr;
  nd->attribute = at;
  if (!nd->op_type) return -1;
  if (!ptrs_push(&g->nodes, nd)) {
    fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
    return -1;
  }
  return out;
}

static int node1(ag_onnx *g, const char *op, int x) { return node(g, op, 1, &x, 0, NULL); }

static int node2(ag_onnx *g, const char *op, int a, int b) {
  int in[2] = {a, b};
  return node(g, op, 2, in, 0, NULL);
}

/* ---- initializers ---- */

static int init_raw(ag_onnx *g, const char *name, int32_t type, int ndim, const int64_t *dims, const void *data,
                    size_t bytes) {
  int v = name ? named_value(g, name) : new_value(g, "const");
  if (v < 0) return -1;
  Onnx__TensorProto *t = ar_alloc(g, sizeof *t);
  int64_t *d = ar_alloc(g, sizeof(int64_t) * (size_t)(ndim > 0 ? ndim : 1));
  uint8_t *raw = ar_alloc(g, bytes);
  if (!t || !d || !raw) return -1;
  onnx__tensor_proto__init(t);
  memcpy(d, dims, sizeof(int64_t) * (size_t)ndim);
  memcpy(raw, data, bytes);
  t->n_dims = (size_t)ndim;
  t->dims = d;
  t->has_data_type = 1;
  t->data_type = type;
  t->name = (char *)vname(g, v);
  t->has_raw_data = 1;
  t->raw_data.len = bytes;
  t->raw_data.data = raw;
  if (!ptrs_push(&g->inits, t)) {
    fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
    return -1;
  }
  return v;
}

/* 1-D int64 constant (shapes, axes, slice bounds). Raw data is
 * little-endian, as this host is. */
static int const_i64(ag_onnx *g, int n, const int64_t *vals) {
  int64_t d = n;
  return init_raw(g, NULL, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, &d, vals, sizeof(int64_t) * (size_t)n);
}

static int const_f32(ag_onnx *g, int ndim, const int64_t *dims, const float *vals) {
  size_t n = 1;
  for (int i = 0; i < ndim; i++) n *= (size_t)dims[i];
  return init_raw(g, NULL, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims, vals, sizeof(float) * n);
}

/* t's values as an f32 initializer named name (one per tensor: a second
 * layer reading the same tensor gets the first's value). */
static int init_tensor(ag_onnx *g, ag_tensor *t, const char *prefix, const char *field) {
  if (g->err != AG_OK) return -1;
  if (!t) {
    fail(g, AG_ERR_INVALID, "ag_onnx: module %s%s has no tensor (a freed or uninitialised module)",
         prefix ? prefix : "", field);
    return -1;
  }
  for (size_t i = 0; i < g->n_shared; i++)
    if (g->shared[i].t == t) return g->shared[i].value;
  char name[256];
  snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", field);
  int64_t n = ag_tensor_numel(t), dims[AG_MAX_DIMS];
  int nd = ag_tensor_ndim(t);
  for (int i = 0; i < nd; i++) dims[i] = ag_tensor_dim(t, i);
  float *host = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
  ag_tensor *f = host ? ag_cast(t, AG_F32) : NULL;
  ag_status st = !host ? AG_ERR_OOM : f ? ag_to_host(f, host, sizeof(float) * (size_t)n) : ag_last_status();
  ag_tensor_release(f);
  if (st != AG_OK) {
    free(host);
    if (st == AG_ERR_OOM && !f) ag_error_set(AG_ERR_OOM, "ag_onnx: out of host memory for %s", name);
    g->err = st;
    return -1;
  }
  int v = init_raw(g, name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, nd, dims, host, sizeof(float) * (size_t)n);
  free(host);
  if (v < 0) return -1;
  if (g->n_shared == g->cap_shared) {
    size_t cap = g->cap_shared ? g->cap_shared * 2 : 16;
    shared_init *p = realloc(g->shared, cap * sizeof *p);
    if (!p) {
      fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
      return -1;
    }
    g->shared = p;
    g->cap_shared = cap;
  }
  g->shared[g->n_shared++] = (shared_init){t, v};
  return v;
}

/* ---- graph ---- */

ag_onnx *ag_onnx_create(const char *name) {
  ag_onnx *g = calloc(1, sizeof *g);
  if (!g) {
    ag_error_set(AG_ERR_OOM, "ag_onnx_create: out of host memory");
    return NULL;
  }
  g->graph_name = ar_str(g, name ? name : "anygrad");
  if (!g->graph_name) {
    ag_onnx_free(g);
    return NULL;
  }
  return g;
}

void ag_onnx_free(ag_onnx *g) {
  if (!g) return;
  for (size_t i = 0; i < g->arena.n; i++) free(g->arena.p[i]);
  free(g->arena.p);
  free(g->names.p);
  free(g->nodes.p);
  free(g->inits.p);
  free(g->inputs.p);
  free(g->outputs.p);
  free(g->shared);
  free(g);
}

ag_status ag_onnx_status(const ag_onnx *g) {
  if (!g) return ag_error_set(AG_ERR_INVALID, "ag_onnx_status: NULL graph");
  return g->err;
}

static int32_t onnx_type(ag_dtype dt) {
  switch (dt) {
    case AG_F32: return ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
    case AG_I64: return ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
    case AG_I32: return ONNX__TENSOR_PROTO__DATA_TYPE__INT32;
    default: return 0;
  }
}

static Onnx__ValueInfoProto *value_info(ag_onnx *g, const char *fn, int v, ag_dtype dt, int ndim,
                                        const int64_t *dims, const char *const *dim_names) {
  if (ndim < 0 || ndim > AG_MAX_DIMS || (ndim > 0 && !dims)) {
    fail(g, AG_ERR_INVALID, "%s: ndim outside 0..8 or NULL dims for '%s'", fn, vname(g, v));
    return NULL;
  }
  if (!onnx_type(dt)) {
    fail(g, AG_ERR_DTYPE, "%s: '%s' must be f32, i64 or i32", fn, vname(g, v));
    return NULL;
  }
  for (int i = 0; i < ndim; i++)
    if (dims[i] < 0 && (!dim_names || !dim_names[i] || !dim_names[i][0])) {
      fail(g, AG_ERR_INVALID, "%s: a dynamic dimension of '%s' needs a name", fn, vname(g, v));
      return NULL;
    }
  Onnx__ValueInfoProto *vi = ar_alloc(g, sizeof *vi);
  Onnx__TypeProto *tp = ar_alloc(g, sizeof *tp);
  Onnx__TypeProto__Tensor *tt = ar_alloc(g, sizeof *tt);
  Onnx__TensorShapeProto *sp = ar_alloc(g, sizeof *sp);
  Onnx__TensorShapeProto__Dimension **dd = ar_alloc(g, sizeof *dd * (size_t)(ndim > 0 ? ndim : 1));
  if (!vi || !tp || !tt || !sp || !dd) return NULL;
  onnx__value_info_proto__init(vi);
  onnx__type_proto__init(tp);
  onnx__type_proto__tensor__init(tt);
  onnx__tensor_shape_proto__init(sp);
  for (int i = 0; i < ndim; i++) {
    Onnx__TensorShapeProto__Dimension *d = ar_alloc(g, sizeof *d);
    if (!d) return NULL;
    onnx__tensor_shape_proto__dimension__init(d);
    if (dims[i] >= 0) {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      d->dim_value = dims[i];
    } else {
      d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      d->dim_param = ar_str(g, dim_names[i]);
      if (!d->dim_param) return NULL;
    }
    dd[i] = d;
  }
  sp->n_dim = (size_t)ndim;
  sp->dim = dd;
  tt->has_elem_type = 1;
  tt->elem_type = onnx_type(dt);
  tt->shape = sp;
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  vi->name = (char *)vname(g, v);
  vi->type = tp;
  return vi;
}

int ag_onnx_input(ag_onnx *g, const char *name, ag_dtype dt, int ndim, const int64_t *dims,
                  const char *const *dim_names) {
  if (!ready(g, 0, NULL)) return -1;
  if (!name || !name[0]) {
    fail(g, AG_ERR_INVALID, "ag_onnx_input: NULL or empty name%s%s", "", "");
    return -1;
  }
  int v = named_value(g, name);
  if (v < 0) return -1;
  Onnx__ValueInfoProto *vi = value_info(g, "ag_onnx_input", v, dt, ndim, dims, dim_names);
  if (!vi) return -1;
  if (!ptrs_push(&g->inputs, vi)) {
    fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
    return -1;
  }
  return v;
}

ag_status ag_onnx_output(ag_onnx *g, int v, const char *name, ag_dtype dt, int ndim, const int64_t *dims,
                         const char *const *dim_names) {
  if (!ready(g, 1, &v)) return g ? g->err : AG_ERR_INVALID;
  if (!name || !name[0]) return fail(g, AG_ERR_INVALID, "ag_onnx_output: NULL or empty name%s%s", "", "");
  int o = named_value(g, name);
  if (o < 0) return g->err;
  /* Identity gives the output its own name whatever made v. */
  int id = node(g, "Identity", 1, &v, 0, NULL);
  if (id < 0) return g->err;
  Onnx__NodeProto *nd = g->nodes.p[g->nodes.n - 1];
  nd->output[0] = (char *)vname(g, o);
  Onnx__ValueInfoProto *vi = value_info(g, "ag_onnx_output", o, dt, ndim, dims, dim_names);
  if (!vi) return g->err;
  if (!ptrs_push(&g->outputs, vi)) return fail(g, AG_ERR_OOM, "ag_onnx: out of host memory%s%s", "", "");
  return AG_OK;
}

/* ---- layers ---- */

/* x @ w^T (+ b). */
static int linear(ag_onnx *g, int x, int w, int b) {
  int64_t perm[2] = {1, 0};
  Onnx__AttributeProto *a[1] = {attr_ints(g, "perm", 2, perm)};
  int wt = node(g, "Transpose", 1, &w, 1, a);
  int y = node2(g, "MatMul", x, wt);
  return b == -2 ? y : node2(g, "Add", y, b);
}

int ag_onnx_linear(ag_onnx *g, const ag_linear *m, const char *prefix, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!m) return fail(g, AG_ERR_INVALID, "ag_onnx_linear: NULL module%s%s", "", ""), -1;
  int w = init_tensor(g, m->weight, prefix, "weight");
  int b = m->bias ? init_tensor(g, m->bias, prefix, "bias") : -2;
  if (w < 0 || b == -1) return -1;
  return linear(g, x, w, b);
}

int ag_onnx_embedding(ag_onnx *g, const ag_embedding_layer *m, const char *prefix, int idx) {
  if (!ready(g, 1, &idx)) return -1;
  if (!m) return fail(g, AG_ERR_INVALID, "ag_onnx_embedding: NULL module%s%s", "", ""), -1;
  int w = init_tensor(g, m->weight, prefix, "weight");
  Onnx__AttributeProto *a[1] = {attr_i(g, "axis", 0)};
  int in[2] = {w, idx};
  return node(g, "Gather", 2, in, 1, a);
}

int ag_onnx_conv2d(ag_onnx *g, const ag_conv2d_layer *m, const char *prefix, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!m) return fail(g, AG_ERR_INVALID, "ag_onnx_conv2d: NULL module%s%s", "", ""), -1;
  int w = init_tensor(g, m->weight, prefix, "weight");
  int b = m->bias ? init_tensor(g, m->bias, prefix, "bias") : -2;
  if (w < 0 || b == -1) return -1;
  const ag_conv2d_params *p = &m->p;
  int64_t k[2] = {ag_tensor_dim(m->weight, 2), ag_tensor_dim(m->weight, 3)};
  int64_t s[2] = {p->stride[0], p->stride[1]}, d[2] = {p->dilation[0], p->dilation[1]};
  int64_t pad[4] = {p->padding[0], p->padding[1], p->padding[0], p->padding[1]};
  Onnx__AttributeProto *a[5] = {attr_ints(g, "kernel_shape", 2, k), attr_ints(g, "strides", 2, s),
                                attr_ints(g, "dilations", 2, d), attr_ints(g, "pads", 4, pad),
                                attr_i(g, "group", p->groups > 0 ? p->groups : 1)};
  int in[3] = {x, w, b};
  return node(g, "Conv", b == -2 ? 2 : 3, in, 5, a);
}

int ag_onnx_batch_norm2d(ag_onnx *g, const ag_batch_norm2d *m, const char *prefix, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!m) return fail(g, AG_ERR_INVALID, "ag_onnx_batch_norm2d: NULL module%s%s", "", ""), -1;
  int in[5] = {x, init_tensor(g, m->weight, prefix, "weight"), init_tensor(g, m->bias, prefix, "bias"),
               init_tensor(g, m->running_mean, prefix, "running_mean"),
               init_tensor(g, m->running_var, prefix, "running_var")};
  Onnx__AttributeProto *a[1] = {attr_f(g, "epsilon", m->eps)};
  return node(g, "BatchNormalization", 5, in, 1, a);
}

int ag_onnx_layer_norm(ag_onnx *g, const ag_layer_norm_layer *m, const char *prefix, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!m) return fail(g, AG_ERR_INVALID, "ag_onnx_layer_norm: NULL module%s%s", "", ""), -1;
  int in[3] = {x, init_tensor(g, m->weight, prefix, "weight"), init_tensor(g, m->bias, prefix, "bias")};
  Onnx__AttributeProto *a[2] = {attr_i(g, "axis", -1), attr_f(g, "epsilon", m->eps)};
  return node(g, "LayerNormalization", 3, in, 2, a);
}

int ag_onnx_rms_norm(ag_onnx *g, ag_tensor *weight, const char *name, double eps, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!(eps >= 0) || isinf(eps))
    return fail(g, AG_ERR_INVALID, "ag_onnx_rms_norm: eps must be finite and >= 0%s%s", "", ""), -1;
  int64_t axes[1] = {-1}, one = 1;
  float e = (float)eps;
  Onnx__AttributeProto *a[2] = {attr_ints(g, "axes", 1, axes), attr_i(g, "keepdims", 1)};
  int sq = node2(g, "Mul", x, x);
  int ms = node(g, "ReduceMean", 1, &sq, 2, a);
  int r = node1(g, "Reciprocal", node1(g, "Sqrt", node2(g, "Add", ms, const_f32(g, 1, &one, &e))));
  int y = node2(g, "Mul", x, r);
  return weight ? node2(g, "Mul", y, init_tensor(g, weight, name, "")) : y;
}

int ag_onnx_max_pool2d(ag_onnx *g, const ag_pool2d_params *p, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!p || p->kernel[0] < 1 || p->kernel[1] < 1)
    return fail(g, AG_ERR_INVALID, "ag_onnx_max_pool2d: NULL params or a kernel < 1%s%s", "", ""), -1;
  int64_t k[2] = {p->kernel[0], p->kernel[1]};
  int64_t s[2] = {p->stride[0] ? p->stride[0] : p->kernel[0], p->stride[1] ? p->stride[1] : p->kernel[1]};
  int64_t pad[4] = {p->padding[0], p->padding[1], p->padding[0], p->padding[1]};
  Onnx__AttributeProto *a[3] = {attr_ints(g, "kernel_shape", 2, k), attr_ints(g, "strides", 2, s),
                                attr_ints(g, "pads", 4, pad)};
  return node(g, "MaxPool", 1, &x, 3, a);
}

int ag_onnx_flatten(ag_onnx *g, int x) {
  Onnx__AttributeProto *a[1] = {g && g->err == AG_OK ? attr_i(g, "axis", 1) : NULL};
  if (!ready(g, 1, &x)) return -1;
  return node(g, "Flatten", 1, &x, 1, a);
}

static int scalar(ag_onnx *g, float v) {
  int64_t one = 1;
  return const_f32(g, 1, &one, &v);
}

/* The op table's unary ops that ONNX opset 17 expresses: one ONNX op, or a
 * composition. Anything else is refused by name. */
int ag_onnx_unary(ag_onnx *g, const char *op, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!op) return fail(g, AG_ERR_INVALID, "ag_onnx_unary: NULL op%s%s", "", ""), -1;
  static const char *const direct[][2] = {
      {"neg", "Neg"},         {"exp", "Exp"},       {"log", "Log"},         {"sqrt", "Sqrt"},
      {"abs", "Abs"},         {"relu", "Relu"},     {"sigmoid", "Sigmoid"}, {"tanh", "Tanh"},
      {"sin", "Sin"},         {"cos", "Cos"},       {"erf", "Erf"},         {"floor", "Floor"},
      {"ceil", "Ceil"},       {"round", "Round"},   {"sign", "Sign"},       {"reciprocal", "Reciprocal"},
      {"selu", "Selu"},       {"softsign", "Softsign"}, {"sinh", "Sinh"},   {"cosh", "Cosh"},
      {"copy", "Identity"},   {"hardswish", "HardSwish"},
  };
  for (size_t i = 0; i < sizeof direct / sizeof direct[0]; i++)
    if (!strcmp(op, direct[i][0])) return node1(g, direct[i][1], x);
  if (!strcmp(op, "silu")) return node2(g, "Mul", x, node1(g, "Sigmoid", x));
  if (!strcmp(op, "square")) return node2(g, "Mul", x, x);
  if (!strcmp(op, "rsqrt")) return node1(g, "Reciprocal", node1(g, "Sqrt", x));
  if (!strcmp(op, "gelu_erf")) {
    /* 0.5 * x * (1 + erf(x / sqrt(2))) */
    int e = node1(g, "Erf", node2(g, "Mul", x, scalar(g, 0.70710678118654752f)));
    return node2(g, "Mul", node2(g, "Mul", x, scalar(g, 0.5f)), node2(g, "Add", e, scalar(g, 1.0f)));
  }
  if (!strcmp(op, "gelu")) {
    /* anygrad's tanh form as x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)) */
    int x3 = node2(g, "Mul", node2(g, "Mul", x, x), x);
    int in = node2(g, "Add", x, node2(g, "Mul", x3, scalar(g, 0.044715f)));
    return node2(g, "Mul", x, node1(g, "Sigmoid", node2(g, "Mul", in, scalar(g, 1.5957691216057308f))));
  }
  fail(g, AG_ERR_UNSUPPORTED, "ag_onnx: op '%s' has no ONNX form (opset 17) in anygrad's exporter%s", op, "");
  return -1;
}

int ag_onnx_activation(ag_onnx *g, ag_activation act, int x) {
  switch (act) {
    case AG_ACT_NONE: return ready(g, 1, &x) ? x : -1;
    case AG_ACT_RELU: return ag_onnx_unary(g, "relu", x);
    case AG_ACT_GELU: return ag_onnx_unary(g, "gelu", x);
    case AG_ACT_TANH: return ag_onnx_unary(g, "tanh", x);
    case AG_ACT_SILU: return ag_onnx_unary(g, "silu", x);
    case AG_ACT_SIGMOID: return ag_onnx_unary(g, "sigmoid", x);
  }
  if (ready(g, 1, &x)) fail(g, AG_ERR_INVALID, "ag_onnx_activation: unknown activation%s%s", "", "");
  return -1;
}

int ag_onnx_mlp(ag_onnx *g, const ag_mlp *m, int x) {
  if (!ready(g, 1, &x)) return -1;
  if (!m || m->n_layers < 1) return fail(g, AG_ERR_INVALID, "ag_onnx_mlp: NULL or empty module%s%s", "", ""), -1;
  for (int i = 0; i < m->n_layers && x >= 0; i++) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "%d.", 2 * i);
    x = ag_onnx_linear(g, &m->layers[i], prefix, x);
    if (i + 1 < m->n_layers) x = ag_onnx_activation(g, m->act, x);
  }
  return x;
}

/* ---- Llama ---- */

static int reshape(ag_onnx *g, int x, int n, const int64_t *shape) { return node2(g, "Reshape", x, const_i64(g, n, shape)); }

static int transpose(ag_onnx *g, int x, int n, const int64_t *perm) {
  Onnx__AttributeProto *a[1] = {attr_ints(g, "perm", n, perm)};
  return node(g, "Transpose", 1, &x, 1, a);
}

/* x [..., D] * cos + cat(-x[..., D/2:], x[..., :D/2]) * sin */
static int rope(ag_onnx *g, int x, int cos_t, int sin_t, int64_t D) {
  int64_t ax = -1, z = 0, h = D / 2, e = D;
  int axes = const_i64(g, 1, &ax);
  int in1[4] = {x, const_i64(g, 1, &z), const_i64(g, 1, &h), axes};
  int in2[4] = {x, const_i64(g, 1, &h), const_i64(g, 1, &e), axes};
  int x1 = node(g, "Slice", 4, in1, 0, NULL), x2 = node(g, "Slice", 4, in2, 0, NULL);
  Onnx__AttributeProto *a[1] = {attr_i(g, "axis", -1)};
  int cat[2] = {node1(g, "Neg", x2), x1};
  int rot = node(g, "Concat", 2, cat, 1, a);
  return node2(g, "Add", node2(g, "Mul", x, cos_t), node2(g, "Mul", rot, sin_t));
}

static int llama_layer(ag_onnx *g, const ag_llama *m, int64_t i, int x, int cos_t, int sin_t, int mask) {
  const ag_llama_layer *l = &m->layers[i];
  const int64_t H = m->cfg.n_heads, KV = m->cfg.n_kv_heads, D = m->head_dim, dim = m->cfg.dim;
  char p[96], q[128];
  snprintf(p, sizeof p, "model.layers.%lld.", (long long)i);
  snprintf(q, sizeof q, "%sinput_layernorm.weight", p);
  int h = ag_onnx_rms_norm(g, l->input_layernorm, q, m->cfg.norm_eps, x);
  snprintf(q, sizeof q, "%sself_attn.q_proj.", p);
  int qv = ag_onnx_linear(g, &l->q_proj, q, h);
  snprintf(q, sizeof q, "%sself_attn.k_proj.", p);
  int kv = ag_onnx_linear(g, &l->k_proj, q, h);
  snprintf(q, sizeof q, "%sself_attn.v_proj.", p);
  int vv = ag_onnx_linear(g, &l->v_proj, q, h);
  /* [B, T, n*D] -> [B, n, T, D] */
  const int64_t perm[4] = {0, 2, 1, 3}, sq[4] = {0, 0, H, D}, sk[4] = {0, 0, KV, D};
  int qh = transpose(g, reshape(g, qv, 4, sq), 4, perm);
  int kh = transpose(g, reshape(g, kv, 4, sk), 4, perm);
  int vh = transpose(g, reshape(g, vv, 4, sk), 4, perm);
  qh = rope(g, qh, cos_t, sin_t, D);
  kh = rope(g, kh, cos_t, sin_t, D);
  /* Query head j uses key/value head j / (H / KV): queries as [B, KV, H/KV,
   * T, D] against keys [B, KV, 1, T, D] broadcast over the group. */
  const int64_t q5[5] = {0, KV, H / KV, -1, D}, k5[5] = {0, KV, 1, -1, D}, kt[5] = {0, 1, 2, 4, 3};
  int qg = reshape(g, qh, 5, q5), kg = reshape(g, kh, 5, k5), vg = reshape(g, vh, 5, k5);
  float scale = (float)(1.0 / sqrt((double)D));
  int s = node2(g, "Mul", node2(g, "MatMul", qg, transpose(g, kg, 5, kt)), scalar(g, scale));
  Onnx__AttributeProto *a[1] = {attr_i(g, "axis", -1)};
  int sm = node2(g, "Add", s, mask);
  int pr = node(g, "Softmax", 1, &sm, 1, a);
  int y = node2(g, "MatMul", pr, vg); /* [B, KV, H/KV, T, D] */
  const int64_t s4[4] = {0, H, -1, D}, s3[3] = {0, 0, dim};
  y = reshape(g, transpose(g, reshape(g, y, 4, s4), 4, perm), 3, s3);
  snprintf(q, sizeof q, "%sself_attn.o_proj.", p);
  x = node2(g, "Add", x, ag_onnx_linear(g, &l->o_proj, q, y));
  snprintf(q, sizeof q, "%spost_attention_layernorm.weight", p);
  h = ag_onnx_rms_norm(g, l->post_attention_layernorm, q, m->cfg.norm_eps, x);
  snprintf(q, sizeof q, "%smlp.gate_proj.", p);
  int gt = ag_onnx_unary(g, "silu", ag_onnx_linear(g, &l->gate_proj, q, h));
  snprintf(q, sizeof q, "%smlp.up_proj.", p);
  int up = ag_onnx_linear(g, &l->up_proj, q, h);
  snprintf(q, sizeof q, "%smlp.down_proj.", p);
  return node2(g, "Add", x, ag_onnx_linear(g, &l->down_proj, q, node2(g, "Mul", gt, up)));
}

int ag_onnx_llama(ag_onnx *g, const ag_llama *m, int ids) {
  if (!ready(g, 1, &ids)) return -1;
  if (!m || !m->layers) return fail(g, AG_ERR_INVALID, "ag_onnx_llama: NULL or freed model%s%s", "", ""), -1;
  /* T = shape(ids)[1], as a 1-element tensor for the slices */
  int64_t one = 1, zero = 0;
  int gi[2] = {node1(g, "Shape", ids), const_i64(g, 1, &one)};
  Onnx__AttributeProto *a0[1] = {attr_i(g, "axis", 0)};
  int T = node(g, "Gather", 2, gi, 1, a0);
  int s_cos[4] = {init_tensor(g, m->rope_cos, "rope.", "cos"), const_i64(g, 1, &zero), T, const_i64(g, 1, &zero)};
  int cos_t = node(g, "Slice", 4, s_cos, 0, NULL);
  int s_sin[4] = {init_tensor(g, m->rope_sin, "rope.", "sin"), s_cos[1], T, s_cos[3]};
  int sin_t = node(g, "Slice", 4, s_sin, 0, NULL);
  /* causal mask [T, T]: -inf strictly above the diagonal, 0 elsewhere
   * (ConstantOfShape of -inf, Trilu keeping k >= 1), built for the input's
   * T rather than stored for max_seq_len (which can be 100k positions). */
  Onnx__AttributeProto *a1[1] = {attr_i(g, "axis", 0)};
  int tt[2] = {T, T};
  int tt2 = node(g, "Concat", 2, tt, 1, a1);
  Onnx__AttributeProto *a2[1] = {attr_f32_tensor(g, "value", -INFINITY)};
  int ninf = node(g, "ConstantOfShape", 1, &tt2, 1, a2);
  int tr[2] = {ninf, init_raw(g, NULL, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, &one, &one, sizeof one)};
  Onnx__AttributeProto *a3[1] = {attr_i(g, "upper", 1)};
  int mask = node(g, "Trilu", 2, tr, 1, a3);
  int x = ag_onnx_embedding(g, &m->embed_tokens, "model.embed_tokens.", ids);
  for (int64_t i = 0; i < m->cfg.n_layers && x >= 0; i++) x = llama_layer(g, m, i, x, cos_t, sin_t, mask);
  x = ag_onnx_rms_norm(g, m->norm, "model.norm.weight", m->cfg.norm_eps, x);
  return ag_onnx_linear(g, &m->lm_head, "lm_head.", x);
}

/* ---- save ---- */

ag_status ag_onnx_save(ag_onnx *g, const char *path) {
  if (!g) return ag_error_set(AG_ERR_INVALID, "ag_onnx_save: NULL graph");
  if (g->err != AG_OK) return g->err;
  if (!path) return ag_error_set(AG_ERR_INVALID, "ag_onnx_save: NULL path");
  if (!g->outputs.n) return ag_error_set(AG_ERR_INVALID, "ag_onnx_save: the graph has no outputs (ag_onnx_output)");
  Onnx__GraphProto graph;
  onnx__graph_proto__init(&graph);
  graph.name = g->graph_name;
  graph.n_node = g->nodes.n;
  graph.node = (Onnx__NodeProto **)g->nodes.p;
  graph.n_initializer = g->inits.n;
  graph.initializer = (Onnx__TensorProto **)g->inits.p;
  graph.n_input = g->inputs.n;
  graph.input = (Onnx__ValueInfoProto **)g->inputs.p;
  graph.n_output = g->outputs.n;
  graph.output = (Onnx__ValueInfoProto **)g->outputs.p;
  Onnx__OperatorSetIdProto opset, *opsets[1] = {&opset};
  onnx__operator_set_id_proto__init(&opset);
  opset.domain = "";
  opset.has_version = 1;
  opset.version = AG_ONNX_OPSET;
  Onnx__ModelProto model;
  onnx__model_proto__init(&model);
  model.has_ir_version = 1;
  model.ir_version = 8;
  model.n_opset_import = 1;
  model.opset_import = opsets;
  model.producer_name = "anygrad";
  model.producer_version = AG_VERSION_STRING;
  model.graph = &graph;
  size_t n = onnx__model_proto__get_packed_size(&model);
  if (n > ((size_t)1 << 31) - 1)
    return ag_error_set(AG_ERR_UNSUPPORTED, "ag_onnx_save: the model is %zu bytes, over protobuf's 2 GiB limit "
                        "(external data is not written)", n);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return ag_error_set(AG_ERR_OOM, "ag_onnx_save: out of host memory for %zu bytes", n);
  onnx__model_proto__pack(&model, buf);
  ag_output *o = NULL;
  ag_status st = ag_output_open(path, "ONNX model", &o);
  if (st == AG_OK) {
    if (fwrite(buf, 1, n, ag_output_file(o)) != n) {
      ag_output_abort(o);
      st = ag_error_set(AG_ERR_IO, "ag_onnx_save: cannot write '%s'", path);
    } else {
      st = ag_output_commit(o);
    }
  }
  free(buf);
  return st;
}

#endif
