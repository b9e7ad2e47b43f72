/* The autograd tape: nodes recorded by differentiable ops, the backward
 * engine (reverse topological order by dependency counting), gradient
 * accumulation into leaves. The grad modes the ops read are in
 * core/tensor/grad_mode.c.
 * Backward formulas live in grad_ops.c; this file owns graph structure. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "memory/alloc_internal.h"
#include "runtime/devstate.h"
#include "anygrad/amp.h"
#include "autograd/grad_internal.h"
#include "tensor/autocast.h"

/* What an AG_G_CHECKPOINT node needs to re-run its block. */
typedef struct ag_ckpt {
  ag_checkpoint_fn fn;
  void *ctx;         /* the copy below, or the caller's pointer when ctx_size is 0 */
  ag_generator *gen; /* restored to (seed, offset) for the re-run; NULL: none */
  uint64_t seed, offset;
  ag_dtype autocast; /* AG_F32: autocast was off in the forward */
  _Alignas(max_align_t) unsigned char copy[AG_CHECKPOINT_MAX_CTX];
} ag_ckpt;

/* What an AG_G_CUSTOM node calls in backward (ag_custom_record). */
typedef struct ag_custom {
  ag_custom_backward_fn backward;
  void (*free_user)(void *user);
  void *user;
  char name[64];
} ag_custom;

static void hooks_free(ag_grad_hooks *h);

/* Live node count for leak tests: an atomic counter, safe from any thread. */
static atomic_llong g_live_nodes;

int64_t ag_live_nodes(void) { return (int64_t)atomic_load(&g_live_nodes); }

/* ---------------- tensor-level API ---------------- */

ag_status ag_tensor_set_requires_grad(ag_tensor *t, bool requires_grad) {
  if (!t) return ag_error_set(AG_ERR_INVALID, "ag_tensor_set_requires_grad: NULL tensor");
  if (ag__bad_tensor(t, "ag_tensor_set_requires_grad")) return ag_last_status();
  if (t->grad_fn) {
    if (requires_grad) return AG_OK;
    return ag_error_set(AG_ERR_STATE,
                        "ag_tensor_set_requires_grad: cannot clear requires_grad of a non-leaf "
                        "tensor (use ag_detach)");
  }
  if (requires_grad && !ag_dtype_is_float(t->dtype))
    return ag_error_set(AG_ERR_DTYPE, "ag_tensor_set_requires_grad: %s tensors cannot require grad "
                        "(only floating-point tensors have gradients)", ag_dtype_name(t->dtype));
  if (requires_grad && ag_inference_mode())
    return ag_error_set(AG_ERR_STATE,
                        "ag_tensor_set_requires_grad: not allowed in inference mode");
  t->requires_grad = requires_grad;
  return AG_OK;
}

/* NULL gives the documented neutral value without an error; a released
 * tensor sets AG_ERR_STATE too. */
static bool live(const ag_tensor *t, const char *fn) {
  if (AG_LIKELY(t && t->magic == AG__T_LIVE)) return true;
  if (t) ag__tensor_unusable(t, fn);
  return false;
}
bool ag_tensor_is_leaf(const ag_tensor *t) { return live(t, "ag_tensor_is_leaf") && !t->grad_fn; }
ag_tensor *ag_tensor_grad(const ag_tensor *t) { return live(t, "ag_tensor_grad") ? t->grad : NULL; }

void ag_tensor_zero_grad(ag_tensor *t) {
  if (!live(t, "ag_tensor_zero_grad") || !t->grad) return;
  ag_tensor *g = t->grad;
  t->grad = NULL;
  ag_tensor_release(g);
}

ag_tensor *ag_detach(ag_tensor *t) {
  if (ag__bad_tensor(t, "ag_detach")) return NULL;
  ag_tensor *d = ag__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
  if (!d) return NULL;
  d->requires_grad = false;
  return d;
}

/* ---------------- recording ---------------- */

ag_tensor *ag__grad_own(ag_tensor *t) { return ag__scope_detach(t); }

void ag__grad_tag(ag_tensor *t, ag_mem_category cat) {
  if (t && t->st && t->st->block) ag__block_set_category(t->st->block, cat);
}

/* Saved tensors may be views of parameters or gradients (a transposed
 * weight): only memory nobody has classified becomes activations. */
static void tag_activation(ag_tensor *t) {
  if (t && t->st && t->st->block && ag__block_category(t->st->block) == AG_MEM_OTHER)
    ag__block_set_category(t->st->block, AG_MEM_ACTIVATIONS);
}

/* The save rule of a table unary node (AG_SAVE_NG for a bad sub-op). */
static ag_opt_save unary_save(const ag_gparams *p) {
  const ag_unary_info *u = ag_unary_info_of((int)p->i[0]);
  return u ? u->save : AG_SAVE_NG;
}

/* Whether the backward of op reads input i's values. */
static bool needs_input(ag_gop op, const ag_gparams *p, int i) {
  switch (op) {
    case AG_G_MUL: case AG_G_DIV: case AG_G_BINARY: case AG_G_MSE:
      return true;
    case AG_G_UNARY: return i == 0 && unary_save(p) == AG_SAVE_X;
    case AG_G_MATMUL: return i <= 1;             /* not a folded bias (input 2) */
    case AG_G_MAX: case AG_G_MIN:
      return i == 0;
    case AG_G_WHERE: return i == 0;              /* the condition */
    case AG_G_CROSS_ENTROPY: return true;        /* logits and targets */
    case AG_G_LAYER_NORM: return i <= 1;         /* x and weight */
    case AG_G_RMS_NORM: return i == 1;           /* weight (x is saved contiguous) */
    case AG_G_VAR: return i == 0;                /* x, to centre it */
    case AG_G_LOGSUMEXP: return i == 0;          /* x, for exp(x - out) */
    case AG_G_NORM: return i == 0;               /* x, its sign or its share */
    case AG_G_GATHER: return i == 1;             /* the index */
    case AG_G_SCATTER_ADD: return i == 1;        /* the index */
    case AG_G_EMBEDDING: return i == 1;          /* indices */
    case AG_G_CHECKPOINT: return true;           /* the block's inputs, to re-run it */
    case AG_G_CONV2D: return i <= 1;             /* x and weight */
    case AG_G_BATCH_NORM: return i <= 1;         /* x and weight */
    case AG_G_GROUP_NORM: return i == 1;         /* weight (x is saved contiguous) */
    default: return false;
  }
}

static bool needs_output(ag_gop op, const ag_gparams *p) {
  switch (op) {
    case AG_G_UNARY: return unary_save(p) == AG_SAVE_Y;
    case AG_G_SOFTMAX: case AG_G_LOG_SOFTMAX: case AG_G_MAX: case AG_G_MIN:
      return true;
    default: return false;
  }
}

/* A node keeps private headers (ag__private_ref) on what it saves: no scope
 * owns them and nobody else releases them, so a caller releasing its own
 * reference or a scope ending never pulls memory from under the graph. The
 * memory counts as activations unless it belongs to a user-created leaf (a
 * parameter or an input batch keeps its own category). */
static ag_tensor *save(ag_tensor *t, bool tag) {
  ag_tensor *r = ag__private_ref(t);
  if (r) r->saved_version = ag__version(r);
  if (r && tag) tag_activation(r);
  return r;
}

static const char *const k_gop_names[AG_GOP_COUNT] = {
    [AG_G_ADD] = "add", [AG_G_SUB] = "sub", [AG_G_MUL] = "mul", [AG_G_DIV] = "div",
    [AG_G_WHERE] = "where", [AG_G_SUM] = "sum", [AG_G_MEAN] = "mean",
    [AG_G_MAX] = "max", [AG_G_MIN] = "min", [AG_G_MATMUL] = "matmul", [AG_G_SOFTMAX] = "softmax",
    [AG_G_LOG_SOFTMAX] = "log_softmax", [AG_G_CROSS_ENTROPY] = "cross_entropy", [AG_G_MSE] = "mse_loss",
    [AG_G_LAYER_NORM] = "layer_norm", [AG_G_EMBEDDING] = "embedding", [AG_G_CONCAT] = "concat",
    [AG_G_DROPOUT] = "dropout", [AG_G_VIEW] = "view", [AG_G_PERMUTE] = "permute", [AG_G_SLICE] = "slice",
    [AG_G_EXPAND] = "expand", [AG_G_CAST] = "cast", [AG_G_TO_DEVICE] = "to_device",
    [AG_G_CHECKPOINT] = "checkpoint",
    [AG_G_CONV2D] = "conv2d", [AG_G_POOL2D] = "pool2d", [AG_G_BATCH_NORM] = "batch_norm",
    [AG_G_RMS_NORM] = "rms_norm", [AG_G_VAR] = "var/std", [AG_G_CUMSUM] = "cumsum",
    [AG_G_GATHER] = "gather/index_select", [AG_G_SDPA] = "scaled_dot_product_attention",
    [AG_G_LOGSUMEXP] = "logsumexp", [AG_G_NORM] = "norm",
    [AG_G_GROUP_NORM] = "group_norm",
    [AG_G_INTERPOLATE] = "interpolate",
    [AG_G_SCATTER_ADD] = "scatter_add/index_add",
    [AG_G_PAD] = "pad",
    [AG_G_CUSTOM] = "custom",
};

const char *ag__node_name(const ag_node *n) {
  if (n->op == AG_G_CUSTOM) return n->custom ? n->custom->name : "custom";
  if (n->op == AG_G_UNARY) {
    const ag_unary_info *u = ag_unary_info_of((int)n->p.i[0]);
    return u ? u->name : "an op";
  }
  if (n->op == AG_G_BINARY) {
    const ag_binary_info *b = ag_binary_info_of((int)n->p.i[0]);
    return b ? b->name : "an op";
  }
  return (unsigned)n->op < AG_GOP_COUNT && k_gop_names[n->op] ? k_gop_names[n->op] : "an op";
}

/* PyTorch's saved-variable check: a tensor the formula reads must still
 * hold what the forward saw. */
static ag_status check_one(const ag_node *n, const ag_tensor *t, const char *what, int i) {
  if (!t || ag__version(t) == t->saved_version) return AG_OK;
  char b[96], w[32];
  if (i >= 0) snprintf(w, sizeof w, "%s %d", what, i);
  else snprintf(w, sizeof w, "%s", what);
  return ag_error_set(AG_ERR_STATE,
                      "ag_backward: a tensor needed for gradient computation has been modified by an in-place "
                      "operation: %s (%s of %s) is at version %u, expected version %u; do the in-place write "
                      "after ag_backward, or write into a copy",
                      ag_tensor_describe(t, b, sizeof b), w, ag__node_name(n),
                      (unsigned)ag__version(t), (unsigned)t->saved_version);
}

static ag_status check_saved_versions(const ag_node *n) {
  ag_status st = AG_OK;
  for (int i = 0; st == AG_OK && i < n->n_in; i++) st = check_one(n, n->e[i].val, "input", i);
  for (int i = 0; st == AG_OK && i < AG_NODE_MAX_SAVED; i++) st = check_one(n, n->saved[i], "saved tensor", i);
  if (st == AG_OK) st = check_one(n, n->out_val, "output", -1);
  return st;
}

/* The recorder behind ag__grad_record (tensor/record.h). */
static ag_status node_record(ag_tensor *out, ag_gop op, int n_inputs, ag_tensor *const *inputs, int n_saved,
                             ag_tensor *const *saved, const ag_gparams *p) {
  if ((unsigned)op >= AG_GOP_COUNT || n_inputs < 0 || n_saved < 0 || n_saved > AG_NODE_MAX_SAVED)
    return ag_error_set(AG_ERR_INTERNAL, "autograd: bad record (op %d, %d inputs, %d saved)", (int)op,
                        n_inputs, n_saved);
  if (out->grad_fn)
    return ag_error_set(AG_ERR_INTERNAL, "autograd: output already has a grad_fn");
  ag_node *n = calloc(1, sizeof *n + (size_t)n_inputs * sizeof(ag_edge));
  if (!n) return ag_error_set(AG_ERR_OOM, "autograd: out of host memory recording a node");
  atomic_init(&n->refcount, 1);
  n->op = op;
  if (p) n->p = *p;
  p = &n->p;
  n->n_in = n_inputs;
  n->out_dtype = out->dtype;
  n->out_ndim = out->ndim;
  memcpy(n->out_shape, out->shape, sizeof n->out_shape);
  n->out_dev = ag_tensor_device(out);
  for (int i = 0; i < n_inputs; i++) {
    ag_tensor *in = inputs[i];
    ag_edge *e = &n->e[i];
    if (!in) continue;
    e->present = true;
    e->dtype = in->dtype;
    e->dev = ag_tensor_device(in);
    e->ndim = in->ndim;
    memcpy(e->shape, in->shape, sizeof e->shape);
    if (in->grad_fn) {
      e->fn = in->grad_fn;
      atomic_fetch_add(&e->fn->refcount, 1);
    } else if (in->requires_grad) {
      e->leaf = ag__hold(in);
    }
    if (needs_input(op, p, i) && !(e->val = save(in, in->grad_fn != NULL))) {
      ag__node_release(n);
      return ag_last_status();
    }
  }
  for (int i = 0; i < n_saved; i++) {
    if (!saved[i]) continue;
    if (saved[i] == out) {
      n->want_out = true; /* an alias below, never out itself: no cycle */
      continue;
    }
    n->saved[i] = save(saved[i], saved[i]->grad_fn != NULL || !saved[i]->requires_grad);
    if (!n->saved[i]) {
      ag__node_release(n);
      return ag_last_status();
    }
  }
  n->n_saved = n_saved;
  if (needs_output(op, p) || n->want_out) {
    /* A storage-sharing header without history: keeping `out` itself would
     * make out -> node -> out a reference cycle. */
    n->out_val = ag__private_ref(out);
    if (n->out_val) n->out_val->saved_version = ag__version(n->out_val);
    if (!n->out_val) {
      ag__node_release(n);
      return ag_last_status();
    }
    tag_activation(n->out_val);
  }
  atomic_fetch_add(&g_live_nodes, 1);
  n->counted = true;
  out->grad_fn = n;
  out->out_index = 0;
  out->requires_grad = true;
  return AG_OK;
}

static void custom_free(ag_node *n) {
  ag_custom *c = n->custom;
  if (!c) return;
  n->custom = NULL;
  if (c->free_user) c->free_user(c->user);
  free(c);
}

/* Release the tensors a node saved for its backward (inputs, saved
 * tensors, output), keeping its edges. */
static void node_drop_values(ag_node *n) {
  for (int i = 0; i < n->n_in; i++) {
    if (n->e[i].val) ag_tensor_release(n->e[i].val);
    n->e[i].val = NULL;
  }
  for (int i = 0; i < AG_NODE_MAX_SAVED; i++) {
    if (n->saved[i]) ag_tensor_release(n->saved[i]);
    n->saved[i] = NULL;
  }
  if (n->out_val) ag_tensor_release(n->out_val);
  n->out_val = NULL;
}

/* Drop what a node keeps for backward; with edges, also its links to earlier
 * nodes (pushed on `stack` for the caller to release without recursion). */
static void node_clear(ag_node *n, ag_node ***stack, int *sn, int *scap) {
  for (int i = 0; i < n->n_in; i++) {
    ag_edge *e = &n->e[i];
    if (e->val) ag_tensor_release(e->val);
    e->val = NULL;
    if (e->leaf) ag__unhold(e->leaf);
    e->leaf = NULL;
    if (e->fn) {
      if (*sn == *scap) {
        int nc = *scap ? *scap * 2 : 64;
        ag_node **ns = realloc(*stack, (size_t)nc * sizeof *ns);
        if (!ns) {
          /* Cannot grow: release recursively (rare; bounded by graph depth). */
          ag__node_release(e->fn);
          e->fn = NULL;
          continue;
        }
        *stack = ns;
        *scap = nc;
      }
      (*stack)[(*sn)++] = e->fn;
      e->fn = NULL;
    }
  }
  for (int i = 0; i < AG_NODE_MAX_SAVED; i++) {
    if (n->saved[i]) ag_tensor_release(n->saved[i]);
    n->saved[i] = NULL;
  }
  if (n->out_val) ag_tensor_release(n->out_val);
  n->out_val = NULL;
  free(n->ckpt);
  n->ckpt = NULL;
  custom_free(n);
}

void ag__node_release(ag_node *first) {
  ag_node **stack = NULL;
  int sn = 0, scap = 0;
  ag_node *n = first;
  for (;;) {
    if (n && atomic_fetch_sub(&n->refcount, 1) == 1) {
      node_clear(n, &stack, &sn, &scap);
      hooks_free(n->hooks);
      if (n->counted) atomic_fetch_sub(&g_live_nodes, 1);
      free(n);
    }
    if (!sn) break;
    n = stack[--sn];
  }
  free(stack);
}

/* ---------------- gradient-ready hooks ---------------- */

typedef struct ag_grad_hook_entry {
  uint64_t id;
  ag_grad_hook_fn fn;      /* a gradient-ready hook, or NULL */
  ag_grad_pre_hook_fn pre; /* a pre-hook (may replace the gradient), or NULL */
  void (*free_user)(void *user);
  void *user;
} ag_grad_hook_entry;

struct ag_grad_hooks {
  int n, cap;
  uint64_t next_id;
  bool firing; /* inside one of the hooks: the list must not change */
  ag_grad_hook_entry *v;
};

/* Append an entry to *list (created on first use). */
static ag_status hook_add(ag_grad_hooks **list, ag_grad_hook_fn fn, ag_grad_pre_hook_fn pre, void *user,
                          void (*free_user)(void *), uint64_t *out_id, const char *where) {
  ag_grad_hooks *h = *list;
  if (h && h->firing)
    return ag_error_set(AG_ERR_STATE, "%s: called from inside one of the tensor's hooks", where);
  if (!h) {
    h = calloc(1, sizeof *h);
    if (!h) return ag_error_set(AG_ERR_OOM, "%s: out of host memory", where);
    h->next_id = 1;
    *list = h;
  }
  if (h->n == h->cap) {
    int nc = h->cap ? h->cap * 2 : 4;
    ag_grad_hook_entry *nv = realloc(h->v, (size_t)nc * sizeof *nv);
    if (!nv) return ag_error_set(AG_ERR_OOM, "%s: out of host memory", where);
    h->v = nv;
    h->cap = nc;
  }
  h->v[h->n].id = h->next_id++;
  h->v[h->n].fn = fn;
  h->v[h->n].pre = pre;
  h->v[h->n].free_user = free_user;
  h->v[h->n].user = user;
  *out_id = h->v[h->n++].id;
  return AG_OK;
}

static void hooks_free(ag_grad_hooks *h) {
  if (!h) return;
  for (int i = 0; i < h->n; i++)
    if (h->v[i].free_user) h->v[i].free_user(h->v[i].user);
  free(h->v);
  free(h);
}

ag_status ag_tensor_add_grad_hook(ag_tensor *t, ag_grad_hook_fn fn, void *user, uint64_t *out_id) {
  if (!t || !fn || !out_id)
    return ag_error_set(AG_ERR_INVALID, "ag_tensor_add_grad_hook: NULL tensor, fn or out_id");
  if (ag__bad_tensor(t, "ag_tensor_add_grad_hook")) return ag_last_status();
  if (t->grad_fn)
    return ag_error_set(AG_ERR_STATE, "ag_tensor_add_grad_hook: not a leaf (hooks go on parameters; an op "
                        "output's gradient is never accumulated)");
  if (!t->requires_grad)
    return ag_error_set(AG_ERR_STATE, "ag_tensor_add_grad_hook: tensor does not require grad, so no "
                        "gradient is ever accumulated into it");
  return hook_add(&t->hooks, fn, NULL, user, NULL, out_id, "ag_tensor_add_grad_hook");
}

ag_status ag_tensor_add_grad_pre_hook(ag_tensor *t, ag_grad_pre_hook_fn fn, void *user,
                                      void (*free_user)(void *user), uint64_t *out_id) {
  if (!t || !fn || !out_id)
    return ag_error_set(AG_ERR_INVALID, "ag_tensor_add_grad_pre_hook: NULL tensor, fn or out_id");
  if (ag__bad_tensor(t, "ag_tensor_add_grad_pre_hook")) return ag_last_status();
  if (!t->requires_grad)
    return ag_error_set(AG_ERR_STATE, "ag_tensor_add_grad_pre_hook: cannot register a hook on a tensor that "
                        "does not require grad");
  return hook_add(t->grad_fn ? &t->grad_fn->hooks : &t->hooks, NULL, fn, user, free_user, out_id,
                  "ag_tensor_add_grad_pre_hook");
}

ag_status ag_tensor_remove_grad_hook(ag_tensor *t, uint64_t id) {
  if (!t) return ag_error_set(AG_ERR_INVALID, "ag_tensor_remove_grad_hook: NULL tensor");
  if (ag__bad_tensor(t, "ag_tensor_remove_grad_hook")) return ag_last_status();
  ag_grad_hooks *h = t->grad_fn ? t->grad_fn->hooks : t->hooks;
  if (h && h->firing)
    return ag_error_set(AG_ERR_STATE, "ag_tensor_remove_grad_hook: called from inside one of the tensor's hooks");
  for (int i = 0; h && i < h->n; i++)
    if (h->v[i].id == id) {
      void (*free_user)(void *) = h->v[i].free_user;
      void *user = h->v[i].user;
      memmove(&h->v[i], &h->v[i + 1], (size_t)(h->n - i - 1) * sizeof *h->v);
      h->n--;
      if (free_user) free_user(user);
      return AG_OK;
    }
  return ag_error_set(AG_ERR_INVALID, "ag_tensor_remove_grad_hook: no hook %llu on this tensor",
                      (unsigned long long)id);
}

int ag_tensor_grad_hook_count(const ag_tensor *t) {
  if (!live(t, "ag_tensor_grad_hook_count")) return 0;
  const ag_grad_hooks *h = t->grad_fn ? t->grad_fn->hooks : t->hooks;
  return h ? h->n : 0;
}

static ag_status hooks_fire(ag_tensor *leaf) {
  ag_grad_hooks *h = leaf->hooks;
  ag_status st = AG_OK;
  if (!h) return AG_OK;
  h->firing = true;
  for (int i = 0; st == AG_OK && i < h->n; i++) {
    if (!h->v[i].fn) continue;
    st = h->v[i].fn(leaf, h->v[i].user);
    if (st != AG_OK && ag_last_status() == AG_OK)
      ag_error_set(st, "ag_backward: a gradient-ready hook failed without a message");
  }
  h->firing = false;
  return st;
}

static bool has_hooks(const ag_tensor *t) { return t && t->hooks && t->hooks->n; }

static bool has_pre(const ag_grad_hooks *h) {
  for (int i = 0; h && i < h->n; i++)
    if (h->v[i].pre) return true;
  return false;
}

/* Run the pre-hooks of h on *g (a reference the engine owns), which each
 * may replace. The hooks run with no scope open (autograd.h). */
static ag_status pre_hooks_run(ag_grad_hooks *h, ag_tensor **g) {
  ag_status st = AG_OK;
  if (!h) return AG_OK;
  h->firing = true;
  for (int i = 0; st == AG_OK && i < h->n; i++) {
    if (!h->v[i].pre) continue;
    ag_tensor *r = NULL;
    void *scope = ag__scope_suspend();
    st = h->v[i].pre(*g, h->v[i].user, &r);
    ag__scope_resume(scope);
    if (st != AG_OK) {
      if (ag_last_status() == AG_OK) ag_error_set(st, "ag_backward: a gradient hook failed without a message");
      ag_tensor_release(r);
      break;
    }
    if (!r) continue;
    if (ag__bad_tensor(r, "ag_backward")) {
      st = ag_last_status();
      break;
    }
    char a[96], b[96];
    if (r->ndim != (*g)->ndim || memcmp(r->shape, (*g)->shape, (size_t)r->ndim * sizeof(int64_t)))
      st = ag_error_set(AG_ERR_SHAPE, "ag_backward: a gradient hook returned %s for a gradient %s (hooks must "
                        "keep the gradient's shape)", ag_tensor_describe(r, a, sizeof a),
                        ag_tensor_describe(*g, b, sizeof b));
    else if (ag__ds(r) != ag__ds(*g))
      st = ag_error_set(AG_ERR_DEVICE, "ag_backward: a gradient hook returned a tensor on %s for a gradient on %s",
                        ag__devlabel(r), ag__devlabel(*g));
    else if (!ag_dtype_is_float(r->dtype))
      st = ag_error_set(AG_ERR_DTYPE, "ag_backward: a gradient hook returned a %s tensor (gradients are floating)",
                        ag_dtype_name(r->dtype));
    if (st == AG_OK) {
      ag_tensor *c = ag_cast(r, (*g)->dtype);
      if (!c) st = ag_last_status();
      else {
        ag_tensor_release(*g);
        *g = c;
      }
    }
    ag_tensor_release(r);
  }
  h->firing = false;
  return st;
}

/* Behind ag__grad_tensor_free (tensor/record.h). */
static void node_tensor_free(ag_tensor *t) {
  if (t->hooks) {
    hooks_free(t->hooks);
    t->hooks = NULL;
  }
  if (t->bw_buf) {
    ag_tensor *b = t->bw_buf;
    t->bw_buf = NULL;
    ag_tensor_release(b);
  }
  if (t->grad) {
    ag_tensor *g = t->grad;
    t->grad = NULL;
    ag_tensor_release(g);
  }
  if (t->grad_fn) {
    ag_node *n = t->grad_fn;
    t->grad_fn = NULL;
    ag__node_release(n);
  }
}

/* ---------------- backward engine ---------------- */

/* Copy (with cast) or add g into leaf->grad. The first gradient is always
 * copied: g may be shared with another leaf or still be read elsewhere. */
static ag_status accumulate(ag_tensor *leaf, ag_tensor *g) {
  if (g->ndim != leaf->ndim || memcmp(g->shape, leaf->shape, (size_t)g->ndim * sizeof(int64_t)))
    return ag_error_set(AG_ERR_INTERNAL, "ag_backward: gradient shape does not match its leaf");
  ag_devstate *ds = ag__ds(leaf);
  ag_kernel_call c;
  if (!leaf->grad && g->dtype == leaf->dtype && g->offset == 0 && ag_tensor_is_contiguous(g) &&
      atomic_load(&g->st->refcount) == 1 && g->st->nbytes == (size_t)g->numel * ag_dtype_size(g->dtype)) {
    /* The first gradient of a step usually owns its buffer outright: adopt
     * it instead of copying (PyTorch steals it the same way). */
    ag_tensor *d = ag__private_ref(g);
    if (d) {
      ag__grad_tag(d, AG_MEM_GRADIENTS);
      leaf->grad = d;
      return AG_OK;
    }
  }
  if (!leaf->grad) {
    ag_mem_category_push(AG_MEM_GRADIENTS);
    ag_tensor *d = ag__tensor_new(ds, leaf->dtype, leaf->ndim, leaf->shape);
    ag_mem_category_pop();
    if (!d) return ag_last_status();
    ag__grad_own(d);
    ag__grad_tag(d, AG_MEM_GRADIENTS);
    ag__kcall_init(&c, AG_K_UNARY, AG_U_COPY, "ag_backward", 2, (ag_tensor *[]){d, g});
    ag_status st = d->numel ? ag__launch(ds, &c) : AG_OK;
    if (st != AG_OK) {
      ag_tensor_release(d);
      return st;
    }
    leaf->grad = d;
    return AG_OK;
  }
  ag_tensor *gc = ag_cast(g, leaf->dtype);
  if (!gc) return ag_last_status();
  ag__version_bump(leaf->grad); /* accumulated in place */
  ag__kcall_init(&c, AG_K_BINARY, AG_B_ADD, "ag_backward", 3,
                 (ag_tensor *[]){leaf->grad, leaf->grad, gc});
  c.s[0] = 1.0;
  ag_status st = leaf->numel ? ag__launch(ds, &c) : AG_OK;
  ag_tensor_release(gc);
  return st;
}

/* ---------------- activation checkpointing ---------------- */

ag_tensor *ag_checkpoint(ag_checkpoint_fn fn, const void *ctx, size_t ctx_size, ag_generator *gen,
                         int n_inputs, ag_tensor *const *inputs) {
  if (!fn || n_inputs < 1 || n_inputs > AG_CHECKPOINT_MAX_INPUTS || !inputs || ctx_size > AG_CHECKPOINT_MAX_CTX ||
      (ctx_size && !ctx)) {
    ag_error_set(AG_ERR_INVALID, "ag_checkpoint: NULL fn or inputs, n_inputs outside 1..%d, or ctx_size above %d "
                 "(or without ctx)", AG_CHECKPOINT_MAX_INPUTS, AG_CHECKPOINT_MAX_CTX);
    return NULL;
  }
  for (int i = 0; i < n_inputs; i++)
    if (!inputs[i]) {
      if (ag_last_status() == AG_OK) ag_error_set(AG_ERR_INVALID, "ag_checkpoint: input %d is NULL", i);
      return NULL;
    }
  /* Nothing to record: run the block as it is. */
  if (!ag_grad_enabled()) return fn((void *)ctx, n_inputs, inputs);
  ag_ckpt *ck = calloc(1, sizeof *ck);
  if (!ck) {
    ag_error_set(AG_ERR_OOM, "ag_checkpoint: out of host memory");
    return NULL;
  }
  ck->fn = fn;
  if (ctx_size) {
    memcpy(ck->copy, ctx, ctx_size);
    ck->ctx = ck->copy;
  } else {
    ck->ctx = (void *)ctx;
  }
  ck->gen = gen;
  if (gen) ag_generator_get_state(gen, &ck->seed, &ck->offset);
  ck->autocast = ag_autocast_enabled() ? ag_autocast_dtype() : AG_F32;
  /* The forward keeps nothing: no graph, and the block's temporaries go
   * with its own scope. */
  ag_no_grad_begin();
  ag_scope_begin();
  ag_tensor *y = fn(ck->ctx, n_inputs, inputs);
  if (y) ag_tensor_keep(y);
  ag_status se = ag_scope_end();
  ag_grad_mode_end();
  if (y && se != AG_OK) {
    ag_tensor_release(y);
    y = NULL;
  }
  if (!y) {
    free(ck);
    return NULL;
  }
  for (int i = 0; i < n_inputs; i++)
    if (y->st == inputs[i]->st) { /* a view of an input would make the node its own input */
      ag_tensor_release(y);
      free(ck);
      ag_error_set(AG_ERR_INVALID, "ag_checkpoint: the block returned (a view of) its input %d", i);
      return NULL;
    }
  if (!ag_dtype_is_float(y->dtype)) { /* an integer result has no gradient: nothing to record */
    free(ck);
    return y;
  }
  if (ag__grad_record(y, AG_G_CHECKPOINT, n_inputs, inputs, 0, NULL, NULL) != AG_OK) {
    ag_tensor_release(y);
    free(ck);
    return NULL;
  }
  y->grad_fn->ckpt = ck;
  return y;
}

/* Re-run the block with grad on from detached copies of its saved inputs
 * (the generator and autocast as in the forward), backpropagate g through
 * that graph - parameters the block reads get their gradients there - and
 * hand the inputs' gradients to the engine. Everything re-computed goes
 * with the scope. */
static ag_status checkpoint_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_ckpt *ck = n->ckpt;
  if (!ck) return ag_error_set(AG_ERR_INTERNAL, "ag_backward: checkpoint node without its block");
  ag_tensor *x[AG_CHECKPOINT_MAX_INPUTS] = {0};
  ag_status st = AG_OK;
  ag_scope_begin();
  for (int i = 0; i < n->n_in && st == AG_OK; i++) {
    x[i] = ag_detach(n->e[i].val);
    if (!x[i]) st = ag_last_status();
    else if ((n->e[i].fn || n->e[i].leaf) && ag_dtype_is_float(x[i]->dtype))
      st = ag_tensor_set_requires_grad(x[i], true);
  }
  uint64_t seed = 0, offset = 0;
  if (ck->gen) ag_generator_get_state(ck->gen, &seed, &offset);
  ag_tensor *y = NULL;
  if (st == AG_OK) {
    if (ck->gen) ag_generator_set_state(ck->gen, ck->seed, ck->offset);
    ag_enable_grad_begin();
    bool ac = ck->autocast != AG_F32;
    if (ac) { /* the backward suspended autocast; the re-run needs the forward's */
      ag__autocast_resume();
      st = ag_autocast_begin(ck->autocast);
    }
    if (st == AG_OK) {
      y = ck->fn(ck->ctx, n->n_in, x);
      if (!y) st = ag_last_status() != AG_OK ? ag_last_status()
                                              : ag_error_set(AG_ERR_INTERNAL, "ag_backward: checkpointed block returned NULL");
      if (ac) ag_autocast_end();
    }
    if (ac) ag__autocast_suspend();
    ag_grad_mode_end();
    if (ck->gen) ag_generator_set_state(ck->gen, seed, offset);
  }
  if (st == AG_OK && y->requires_grad) st = ag_backward(y, g, false);
  for (int i = 0; i < n->n_in; i++) {
    if (st == AG_OK && x[i] && x[i]->grad && (n->e[i].fn || n->e[i].leaf)) {
      gin[i] = x[i]->grad; /* the engine takes this reference */
      x[i]->grad = NULL;
    }
  }
  ag_status se = ag_scope_end();
  if (st == AG_OK && se != AG_OK) st = se;
  if (st != AG_OK)
    for (int i = 0; i < n->n_in; i++) {
      ag_tensor_release(gin[i]);
      gin[i] = NULL;
    }
  return st;
}

typedef struct topo {
  ag_node **nodes;
  int *deps;
  ag_tensor **gbuf;
  int n, cap;
  ag_tensor **leaves; /* leaves with hooks this pass counted first (reset on error) */
  int nl;
} topo;

/* What ag_autograd_grad gathers instead of accumulating: per input, the
 * gradient so far (a reference the engine owns, out of any scope). */
typedef struct capture {
  int n;
  ag_tensor *const *inputs;
  ag_tensor **g;
} capture;

/* g (a reference the caller hands over) added into *slot, which stays out
 * of any scope so that a nested pass's scope cannot free it. */
static ag_status hold_into(ag_tensor **slot, ag_tensor *g) {
  if (!*slot) {
    *slot = ag__scope_detach(g);
    return AG_OK;
  }
  ag_tensor *s = ag_add(*slot, g);
  ag_tensor_release(*slot);
  ag_tensor_release(g);
  *slot = ag__scope_detach(s);
  return s ? AG_OK : ag_last_status();
}

/* Gather g (borrowed) for every input produced by node n (fn) or being the
 * leaf `leaf`. */
static ag_status capture_add(capture *cap, const ag_node *fn, const ag_tensor *leaf, ag_tensor *g) {
  ag_status st = AG_OK;
  for (int j = 0; st == AG_OK && j < cap->n; j++) {
    const ag_tensor *in = cap->inputs[j];
    if (!(fn ? in->grad_fn == fn : in == leaf)) continue;
    ag_tensor *a = ag__alias(g);
    st = a ? hold_into(&cap->g[j], a) : ag_last_status();
  }
  return st;
}

/* Count, on every hooked leaf, the edges of this pass that lead to it: the
 * leaf is finished when the last of them has been processed. Counts add up
 * across nested passes (a checkpoint's re-run) on the same thread. */
static ag_status count_leaf_edges(topo *t) {
  int cap = 0;
  for (int k = 0; k < t->n; k++)
    for (int i = 0; i < t->nodes[k]->n_in; i++) {
      ag_tensor *l = t->nodes[k]->e[i].leaf;
      if (!has_hooks(l)) continue;
      if (l->bw_pending++ == 0) {
        if (t->nl == cap) {
          int nc = cap ? cap * 2 : 16;
          ag_tensor **nv = realloc(t->leaves, (size_t)nc * sizeof *nv);
          if (!nv) {
            l->bw_pending--;
            return ag_error_set(AG_ERR_OOM, "ag_backward: out of host memory");
          }
          t->leaves = nv;
          cap = nc;
        }
        l->bw_got = false;
        t->leaves[t->nl++] = l;
      }
    }
  return AG_OK;
}

/* One edge into a hooked leaf is done (got: it carried a gradient that is
 * now accumulated, or held back in bw_buf for the pre-hooks); the last one
 * runs the pre-hooks on the pass's gradient, accumulates it and fires the
 * gradient-ready hooks. */
static ag_status leaf_edge_done(ag_tensor *l, bool got, ag_status st) {
  if (l->bw_pending <= 0) return st; /* hooked after this pass counted */
  if (got) l->bw_got = true;
  if (--l->bw_pending) return st;
  bool fire = l->bw_got;
  l->bw_got = false;
  ag_tensor *b = l->bw_buf;
  l->bw_buf = NULL;
  if (st == AG_OK && b) {
    st = pre_hooks_run(l->hooks, &b);
    if (st == AG_OK) st = accumulate(l, b);
  }
  ag_tensor_release(b);
  return st == AG_OK && fire ? hooks_fire(l) : st;
}

static ag_status topo_add(topo *t, ag_node *n) {
  if (t->n == t->cap) {
    int nc = t->cap ? t->cap * 2 : 64;
    ag_node **nn = realloc(t->nodes, (size_t)nc * sizeof *nn);
    if (!nn) return ag_error_set(AG_ERR_OOM, "ag_backward: out of host memory");
    t->nodes = nn;
    t->cap = nc;
  }
  n->tmp_idx = t->n;
  n->tmp_mark = true;
  t->nodes[t->n++] = n;
  return AG_OK;
}

/* Collect every node reachable from the roots already added (iterative). */
static ag_status collect(topo *t) {
  ag_status st = AG_OK;
  for (int k = 0; st == AG_OK && k < t->n; k++) {
    ag_node *n = t->nodes[k];
    if (n->released)
      return ag_error_set(AG_ERR_STATE,
                          "ag_backward: trying to backward through a graph a second time; its saved "
                          "tensors were freed by the first ag_backward (pass retain_graph=true to it)");
    for (int i = 0; i < n->n_in && st == AG_OK; i++) {
      ag_node *f = n->e[i].fn;
      if (f && !f->tmp_mark) st = topo_add(t, f);
    }
  }
  return st;
}

static ag_status add_into(ag_tensor **slot, ag_tensor *g) {
  if (!*slot) {
    *slot = g;
    return AG_OK;
  }
  ag_tensor *s = ag_add(*slot, g);
  ag_tensor_release(*slot);
  ag_tensor_release(g);
  *slot = s;
  return s ? AG_OK : ag_last_status();
}

/* The caller's backward of an AG_G_CUSTOM node, with no scope open; its
 * gradients checked against the inputs and cast to their dtypes. */
static ag_status custom_backward(ag_node *n, ag_tensor *g, ag_tensor **gin) {
  ag_custom *c = n->custom;
  if (!c) return ag_error_set(AG_ERR_INTERNAL, "ag_backward: custom node without its function");
  void *scope = ag__scope_suspend();
  ag_status st = c->backward(c->user, g, n->n_in, gin);
  ag__scope_resume(scope);
  if (st != AG_OK && ag_last_status() == AG_OK)
    ag_error_set(st, "ag_backward: the backward of %s failed without a message", c->name);
  for (int i = 0; st == AG_OK && i < n->n_in; i++) {
    ag_edge *e = &n->e[i];
    if (!gin[i]) continue;
    if (!(e->fn || e->leaf) || ag__bad_tensor(gin[i], "ag_backward")) {
      if (ag_last_status() != AG_OK) st = ag_last_status();
      ag_tensor_release(gin[i]);
      gin[i] = NULL;
      continue;
    }
    char a[96];
    if (gin[i]->ndim != e->ndim || memcmp(gin[i]->shape, e->shape, (size_t)e->ndim * sizeof(int64_t)))
      st = ag_error_set(AG_ERR_SHAPE, "ag_backward: the backward of %s returned %s as the gradient of input %d, "
                        "which has %d dims of another shape", c->name, ag_tensor_describe(gin[i], a, sizeof a), i,
                        e->ndim);
    else if (ag_tensor_device(gin[i]).backend != e->dev.backend || ag_tensor_device(gin[i]).index != e->dev.index)
      st = ag_error_set(AG_ERR_DEVICE, "ag_backward: the backward of %s returned the gradient of input %d on %s, "
                        "another device than the input's", c->name, i, ag__devlabel(gin[i]));
    else if (!ag_dtype_is_float(gin[i]->dtype))
      st = ag_error_set(AG_ERR_DTYPE, "ag_backward: the backward of %s returned a %s gradient for input %d",
                        c->name, ag_dtype_name(gin[i]->dtype), i);
    else if (gin[i]->dtype != e->dtype) {
      ag_tensor *cc = ag_cast(gin[i], e->dtype);
      if (!cc) st = ag_last_status();
      ag_tensor_release(gin[i]);
      gin[i] = cc;
    }
  }
  if (st != AG_OK)
    for (int i = 0; i < n->n_in; i++) {
      ag_tensor_release(gin[i]);
      gin[i] = NULL;
    }
  return st;
}

/* The engine: propagate seeds[r] (references it takes) from the graphs of
 * outs[r] (non-leaves). Without cap, gradients accumulate into the leaves
 * and leaf hooks run; with cap, the gradients of cap's inputs are gathered
 * and no leaf is written. Runs inside the caller's scope and no-grad. */
static ag_status run_graph(int n_out, ag_tensor *const *outs, ag_tensor **seeds, bool retain_graph,
                           capture *cap) {
  ag_status st = AG_OK;
  topo t = {0};
  for (int r = 0; st == AG_OK && r < n_out; r++)
    if (!outs[r]->grad_fn->tmp_mark) st = topo_add(&t, outs[r]->grad_fn);
  if (st == AG_OK) st = collect(&t);
  if (st == AG_OK && !cap) st = count_leaf_edges(&t);
  if (st == AG_OK) {
    size_t nn = t.n > 0 ? (size_t)t.n : 1;
    t.deps = calloc(nn, sizeof *t.deps);
    t.gbuf = calloc(nn, sizeof *t.gbuf);
    if (!t.deps || !t.gbuf) st = ag_error_set(AG_ERR_OOM, "ag_backward: out of host memory");
  }
  for (int r = 0; r < n_out; r++) {
    if (st == AG_OK) st = add_into(&t.gbuf[outs[r]->grad_fn->tmp_idx], seeds[r]);
    else ag_tensor_release(seeds[r]);
    seeds[r] = NULL;
  }
  if (st == AG_OK) {
    for (int k = 0; k < t.n; k++)
      for (int i = 0; i < t.nodes[k]->n_in; i++)
        if (t.nodes[k]->e[i].fn) t.deps[t.nodes[k]->e[i].fn->tmp_idx]++;
    /* Kahn's algorithm: a node runs once every consumer has sent its
     * gradient; the roots nobody consumes start. */
    int *ready = malloc((size_t)t.n * sizeof *ready);
    int nr = 0;
    if (!ready) st = ag_error_set(AG_ERR_OOM, "ag_backward: out of host memory");
    else
      for (int k = t.n - 1; k >= 0; k--)
        if (!t.deps[k]) ready[nr++] = k;
    ag_tensor *gi[AG_NODE_MAX_INPUTS_STACK];
    while (st == AG_OK && nr) {
      int k = ready[--nr];
      ag_node *n = t.nodes[k];
      ag_tensor *g = t.gbuf[k];
      t.gbuf[k] = NULL;
      ag_tensor **gin = n->n_in <= AG_NODE_MAX_INPUTS_STACK ? gi : calloc((size_t)n->n_in, sizeof *gin);
      if (!gin) {
        ag_tensor_release(g);
        st = ag_error_set(AG_ERR_OOM, "ag_backward: out of host memory");
        break;
      }
      memset(gin, 0, (size_t)n->n_in * sizeof *gin);
      if (g && cap) st = capture_add(cap, n, NULL, g); /* before its hooks, as torch */
      if (st == AG_OK && g && has_pre(n->hooks)) st = pre_hooks_run(n->hooks, &g);
      if (st == AG_OK && g) st = check_saved_versions(n);
      if (ag__launch_hook_active()) ag__launch_node_set(ag__node_name(n), k); /* op traces name the node */
      if (st == AG_OK && g)
        st = n->op == AG_G_CHECKPOINT ? checkpoint_backward(n, g, gin)
             : n->op == AG_G_CUSTOM   ? custom_backward(n, g, gin)
                                      : ag__node_backward(n, g, gin);
      if (ag__launch_hook_active()) ag__launch_node_set(NULL, -1);
      ag_tensor_release(g);
      /* Without retain_graph a node's saved tensors go as soon as it has
       * run, not when the whole backward ends: the activations of the
       * layers already done no longer sit under the gradients of the ones
       * still to do (and a checkpointed block's re-run no longer sits on
       * top of everything saved after it). The node counts as released, so
       * a second backward through it, even after an error, is refused. */
      if (st == AG_OK && !retain_graph) {
        node_drop_values(n);
        n->released = true;
      }
      for (int i = 0; i < n->n_in; i++) {
        ag_edge *e = &n->e[i];
        bool got = gin[i] != NULL;
        if (st == AG_OK && gin[i]) {
          if (e->leaf && cap) {
            st = capture_add(cap, NULL, e->leaf, gin[i]);
            ag_tensor_release(gin[i]);
          } else if (e->leaf && e->leaf->bw_pending > 0 && has_pre(e->leaf->hooks)) {
            st = hold_into(&e->leaf->bw_buf, gin[i]); /* the pre-hooks see the pass's sum */
          } else if (e->leaf) {
            st = accumulate(e->leaf, gin[i]);
            ag_tensor_release(gin[i]);
          } else if (e->fn) {
            st = add_into(&t.gbuf[e->fn->tmp_idx], gin[i]);
          } else {
            ag_tensor_release(gin[i]);
          }
        } else if (gin[i]) {
          ag_tensor_release(gin[i]);
        }
        if (!cap && e->leaf && e->leaf->bw_pending > 0) st = leaf_edge_done(e->leaf, st == AG_OK && got, st);
        if (e->fn && --t.deps[e->fn->tmp_idx] == 0) ready[nr++] = e->fn->tmp_idx;
      }
      if (gin != gi) free(gin);
    }
    free(ready);
  }
  if (st != AG_OK) /* a failed pass leaves no counts or held gradients behind */
    for (int k = 0; k < t.nl; k++) {
      ag_tensor *l = t.leaves[k];
      l->bw_pending = 0;
      l->bw_got = false;
      if (l->bw_buf) {
        ag_tensor *b = l->bw_buf;
        l->bw_buf = NULL;
        ag_tensor_release(b);
      }
    }
  free(t.leaves);
  for (int k = 0; k < t.n; k++) {
    t.nodes[k]->tmp_mark = false;
    if (t.gbuf && t.gbuf[k]) ag_tensor_release(t.gbuf[k]);
  }
  if (st == AG_OK && !retain_graph) {
    ag_node **stack = NULL;
    int sn = 0, scap = 0;
    for (int k = 0; k < t.n; k++) {
      node_clear(t.nodes[k], &stack, &sn, &scap);
      t.nodes[k]->released = true;
    }
    /* Edge references dropped by node_clear: nodes still referenced by the
     * collected set stay alive until their tensors go. */
    for (int k = 0; k < sn; k++) ag__node_release(stack[k]);
    free(stack);
  }
  free(t.nodes);
  free(t.deps);
  free(t.gbuf);
  return st;
}

/* Whether grad fits out as its gradient (shape, device, floating);
 * `what` names the caller and argument in the message. */
static ag_status check_seed(const ag_tensor *out, const ag_tensor *grad, const char *what) {
  if (!grad && out->numel != 1)
    return ag_error_set(AG_ERR_SHAPE, "%s: a gradient is needed for a non-scalar output "
                        "(%lld elements)", what, (long long)out->numel);
  if (!grad) return AG_OK;
  if (grad->ndim != out->ndim || memcmp(grad->shape, out->shape, (size_t)out->ndim * sizeof(int64_t))) {
    char a[96], b[96];
    return ag_error_set(AG_ERR_SHAPE, "%s: gradient %s does not match output %s", what,
                        ag_tensor_describe(grad, a, sizeof a), ag_tensor_describe(out, b, sizeof b));
  }
  if (ag__ds(grad) != ag__ds(out))
    return ag_error_set(AG_ERR_DEVICE, "%s: gradient on %s, output on %s", what, ag__devlabel(grad),
                        ag__devlabel(out));
  if (!ag_dtype_is_float(grad->dtype))
    return ag_error_set(AG_ERR_DTYPE, "%s: gradient must be floating point", what);
  return AG_OK;
}

static ag_tensor *make_seed(ag_tensor *out, ag_tensor *grad) {
  return grad ? ag_cast(grad, out->dtype) : ag_full(ag_tensor_device(out), out->dtype, out->ndim, out->shape, 1.0);
}

ag_status ag_backward(ag_tensor *out, ag_tensor *grad, bool retain_graph) {
  if (ag__bad_tensor(out, "ag_backward")) return ag_last_status();
  if (grad && ag__bad_tensor(grad, "ag_backward")) return ag_last_status();
  if (ag_inference_mode()) return ag_error_set(AG_ERR_STATE, "ag_backward: not allowed in inference mode");
  if (!ag_dtype_is_float(out->dtype))
    return ag_error_set(AG_ERR_DTYPE, "ag_backward: %s tensors have no gradient", ag_dtype_name(out->dtype));
  if (!out->requires_grad)
    return ag_error_set(AG_ERR_STATE, "ag_backward: tensor does not require grad and has no graph "
                        "(was it computed under no-grad, or from tensors without requires_grad?)");
  ag_status st = check_seed(out, grad, "ag_backward");
  if (st != AG_OK) return st;

  ag_scope_begin();
  ag_no_grad_begin();
  /* Backward runs in the dtypes the forward recorded, never re-cast by an
   * autocast region the caller left open. */
  ag__autocast_suspend();
  ag_tensor *seed = make_seed(out, grad);
  if (!seed) st = ag_last_status();
  if (st == AG_OK && !out->grad_fn) {
    if (has_pre(out->hooks)) st = pre_hooks_run(out->hooks, &seed);
    if (st == AG_OK) st = accumulate(out, seed);
    if (st == AG_OK && has_hooks(out) && out->bw_pending == 0) st = hooks_fire(out);
  } else if (st == AG_OK) {
    st = run_graph(1, &out, &seed, retain_graph, NULL);
    seed = NULL;
  }
  if (seed) ag_tensor_release(seed);
  ag__autocast_resume();
  ag_grad_mode_end();
  ag_status se = ag_scope_end();
  if (st == AG_OK) st = se;
  return st;
}

ag_status ag_autograd_grad(int n_outputs, ag_tensor *const *outputs, ag_tensor *const *grad_outputs,
                           int n_inputs, ag_tensor *const *inputs, bool retain_graph, bool allow_unused,
                           ag_tensor **out_grads) {
  static const char *const W = "ag_autograd_grad";
  if (!out_grads || n_inputs < 1)
    return ag_error_set(AG_ERR_INVALID, "%s: NULL out_grads or no inputs", W);
  for (int j = 0; j < n_inputs; j++) out_grads[j] = NULL;
  if (!outputs || !inputs || n_outputs < 1)
    return ag_error_set(AG_ERR_INVALID, "%s: NULL outputs or inputs, or no outputs", W);
  for (int r = 0; r < n_outputs; r++) {
    ag_tensor *o = outputs[r], *g = grad_outputs ? grad_outputs[r] : NULL;
    if (!o) return ag_last_status() != AG_OK ? ag_last_status() : ag_error_set(AG_ERR_INVALID, "%s: output %d is NULL", W, r);
    if (ag__bad_tensor(o, W) || (g && ag__bad_tensor(g, W))) return ag_last_status();
    if (!ag_dtype_is_float(o->dtype) || !o->requires_grad)
      return ag_error_set(AG_ERR_STATE, "%s: element %d of the outputs does not require grad and does not have "
                          "a grad_fn", W, r);
    ag_status st = check_seed(o, g, W);
    if (st != AG_OK) return st;
  }
  for (int j = 0; j < n_inputs; j++) {
    ag_tensor *x = inputs[j];
    if (!x) return ag_last_status() != AG_OK ? ag_last_status() : ag_error_set(AG_ERR_INVALID, "%s: input %d is NULL", W, j);
    if (ag__bad_tensor(x, W)) return ag_last_status();
    if (!x->requires_grad)
      return ag_error_set(AG_ERR_STATE, "%s: input %d does not require grad (one of the differentiated tensors "
                          "does not require grad)", W, j);
  }
  if (ag_inference_mode()) return ag_error_set(AG_ERR_STATE, "%s: not allowed in inference mode", W);

  ag_status st = AG_OK;
  ag_tensor **g = calloc((size_t)n_inputs, sizeof *g);
  ag_tensor **seeds = calloc((size_t)n_outputs, sizeof *seeds);
  ag_tensor **roots = calloc((size_t)n_outputs, sizeof *roots);
  if (!g || !seeds || !roots) {
    free(g);
    free(seeds);
    free(roots);
    return ag_error_set(AG_ERR_OOM, "%s: out of host memory", W);
  }
  capture cap = {n_inputs, inputs, g};
  ag_scope_begin();
  ag_no_grad_begin();
  ag__autocast_suspend();
  int nroots = 0;
  for (int r = 0; st == AG_OK && r < n_outputs; r++) {
    ag_tensor *s = make_seed(outputs[r], grad_outputs ? grad_outputs[r] : NULL);
    if (!s) {
      st = ag_last_status();
    } else if (!outputs[r]->grad_fn) { /* a leaf output: its own gradient is the seed */
      st = capture_add(&cap, NULL, outputs[r], s);
      ag_tensor_release(s);
    } else {
      roots[nroots] = outputs[r];
      seeds[nroots++] = s;
    }
  }
  if (st == AG_OK && nroots) {
    st = run_graph(nroots, roots, seeds, retain_graph, &cap);
  } else {
    for (int r = 0; r < nroots; r++) ag_tensor_release(seeds[r]);
  }
  for (int j = 0; st == AG_OK && j < n_inputs; j++)
    if (!g[j] && !allow_unused)
      st = ag_error_set(AG_ERR_STATE, "%s: input %d was not used in the graph (pass allow_unused to get no "
                        "gradient for it)", W, j);
  for (int j = 0; st == AG_OK && j < n_inputs; j++) {
    if (!g[j]) continue;
    ag_tensor *c = ag_cast(g[j], inputs[j]->dtype);
    if (!c) st = ag_last_status();
    else out_grads[j] = ag__grad_own(c);
  }
  for (int j = 0; j < n_inputs; j++) ag_tensor_release(g[j]);
  if (st != AG_OK)
    for (int j = 0; j < n_inputs; j++) {
      ag_tensor_release(out_grads[j]);
      out_grads[j] = NULL;
    }
  free(g);
  free(seeds);
  free(roots);
  ag__autocast_resume();
  ag_grad_mode_end();
  ag_status se = ag_scope_end();
  if (st == AG_OK && se != AG_OK) {
    st = se;
    for (int j = 0; j < n_inputs; j++) {
      ag_tensor_release(out_grads[j]);
      out_grads[j] = NULL;
    }
  }
  return st;
}

/* ---------------- custom functions ---------------- */

ag_status ag_custom_record(ag_tensor *out, const char *name, int n_inputs, ag_tensor *const *inputs,
                           ag_custom_backward_fn backward, void (*free_user)(void *user), void *user) {
  ag_status st = AG_OK;
  bool any = false;
  if (!out || !backward || n_inputs < 0 || (n_inputs > 0 && !inputs)) {
    st = ag_last_status() != AG_OK && !out ? ag_last_status()
         : ag_error_set(AG_ERR_INVALID, "ag_custom_record: NULL out, backward or inputs, or n_inputs < 0");
    goto fail;
  }
  if (ag__bad_tensor(out, "ag_custom_record")) {
    st = ag_last_status();
    goto fail;
  }
  if (out->grad_fn || out->requires_grad) {
    st = ag_error_set(AG_ERR_STATE, "ag_custom_record: the output already has a graph or requires grad (compute "
                      "it under no-grad, or record on a detached alias)");
    goto fail;
  }
  if (!ag_dtype_is_float(out->dtype)) {
    st = ag_error_set(AG_ERR_DTYPE, "ag_custom_record: %s outputs have no gradient", ag_dtype_name(out->dtype));
    goto fail;
  }
  for (int i = 0; i < n_inputs; i++) {
    if (inputs[i] && ag__bad_tensor(inputs[i], "ag_custom_record")) {
      st = ag_last_status();
      goto fail;
    }
    if (inputs[i] && inputs[i]->requires_grad) any = true;
  }
  if (!any || !ag_grad_enabled()) goto fail; /* nothing to record: AG_OK */
  ag_custom *c = calloc(1, sizeof *c);
  if (!c) {
    st = ag_error_set(AG_ERR_OOM, "ag_custom_record: out of host memory");
    goto fail;
  }
  c->backward = backward;
  c->free_user = free_user;
  c->user = user;
  snprintf(c->name, sizeof c->name, "%s", name && *name ? name : "custom");
  st = ag__grad_record(out, AG_G_CUSTOM, n_inputs, inputs, 0, NULL, NULL);
  if (st != AG_OK) {
    free(c);
    goto fail;
  }
  out->grad_fn->custom = c;
  return AG_OK;
fail:
  if (free_user) free_user(user);
  return st;
}

/* ---------------- the recorded graph ---------------- */

ag_grad_node *ag_tensor_grad_fn(const ag_tensor *t) { return live(t, "ag_tensor_grad_fn") ? t->grad_fn : NULL; }

ag_grad_node *ag_grad_node_retain(ag_grad_node *n) {
  if (n) atomic_fetch_add(&n->refcount, 1);
  return n;
}

void ag_grad_node_release(ag_grad_node *n) {
  if (n) ag__node_release(n);
}

const char *ag_grad_node_name(const ag_grad_node *n) { return n ? ag__node_name(n) : NULL; }

int ag_grad_node_input_count(const ag_grad_node *n) { return n ? n->n_in : 0; }

ag_grad_node *ag_grad_node_next(const ag_grad_node *n, int i, ag_tensor **out_leaf) {
  if (out_leaf) *out_leaf = NULL;
  if (!n || i < 0 || i >= n->n_in) return NULL;
  if (out_leaf) *out_leaf = n->e[i].leaf;
  return n->e[i].fn;
}


/* The ops (core/tensor/, a layer below) record nodes and free a tensor's
 * autograd fields through this recorder (tensor/record.h). */
static const ag_grad_recorder k_recorder = {node_record, node_tensor_free};

__attribute__((constructor)) static void recorder_install(void) { ag__grad_recorder_set(&k_recorder); }
