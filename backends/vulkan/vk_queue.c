/* Streams: one queue per device shared under a lock; each stream records
 * commands into batches (a command buffer plus a host-visible arena for
 * argument blocks and staged uploads) and submits a batch when it is full,
 * or when the host needs a result (synchronize, query, event, copy to
 * pageable memory). Every submit signals the next value of the stream's
 * timeline semaphore; events are (semaphore, value) pairs and cross-stream
 * waits are semaphore waits on the next submit; a submitted batch keeps the
 * semaphores it waits on alive until it has completed (another stream, or
 * the event, may be destroyed first). Shaders address memory directly
 * (buffer device addresses), so the barriers are global memory barriers,
 * placed only where a command depends on one recorded since the last
 * barrier: the stream tracks the byte ranges read and written since then
 * (from the launches' operands), a launch's first dispatch waits when it
 * reads or writes a range written since (RAW, WAW) or writes one read
 * since (WAR), every further dispatch of one launch waits, and a copy has
 * a barrier before it (when anything was recorded since the last) and
 * after it. */
#include <stdlib.h>
#include <string.h>

#include "vk_internal.h"

static ag_status vkb_stream_synchronize_l(ag_bstream *s);
static void tl_release(struct vkb_timeline *t);

/* Drops the references a completed batch held on the semaphores it waited on. */
static void batch_release_waits(vkb_batch *b) {
  for (int i = 0; i < b->nwait; i++) tl_release(b->wait_tl[i]);
  b->nwait = 0;
}

/* The last reference destroys the semaphore: every batch that signals it
 * (its stream's, waited for at stream destruction) or waits on it (holding a
 * reference until it completes) is done by then. */
static void tl_release(vkb_timeline *t) {
  if (t && atomic_fetch_sub(&t->refs, 1) == 1) {
    t->d->f.vkDestroySemaphore(t->d->dev, t->sem, NULL);
    free(t);
  }
}

static uint64_t tl_value(vkb_timeline *t) {
  uint64_t v = 0;
  t->d->f.vkGetSemaphoreCounterValue(t->d->dev, t->sem, &v);
  return v;
}

static ag_status tl_wait(vkb_timeline *t, uint64_t v) {
  if (tl_value(t) >= v) return AG_OK;
  VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
                            .semaphoreCount = 1,
                            .pSemaphores = &t->sem,
                            .pValues = &v};
  VkResult r = t->d->f.vkWaitSemaphores(t->d->dev, &wi, UINT64_MAX);
  return r == VK_SUCCESS ? AG_OK : vkb_error(r, "vkWaitSemaphores");
}

atomic_uint_fast64_t vkb_n_dispatches, vkb_n_barriers;

/* For the tests (tests/gpu3_vulkan_perf_test.c, through dlsym): the
 * dispatches and barriers this process recorded, on every stream. */
__attribute__((visibility("default"))) void ag_vulkan_debug_counters(uint64_t *out_dispatches,
                                                                     uint64_t *out_barriers);
void ag_vulkan_debug_counters(uint64_t *out_dispatches, uint64_t *out_barriers) {
  if (out_dispatches) *out_dispatches = (uint64_t)atomic_load(&vkb_n_dispatches);
  if (out_barriers) *out_barriers = (uint64_t)atomic_load(&vkb_n_barriers);
}

void vkb_barrier(ag_bstream *s, VkCommandBuffer cb) {
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
  VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  s->d->f.vkCmdPipelineBarrier(cb, st, st, 0, 1, &mb, 0, NULL, 0, NULL);
  atomic_fetch_add(&vkb_n_barriers, 1);
  s->nrd = s->nwr = 0;
  s->wr_all = false;
}

/* ---- barrier tracking ---- */

static bool any_overlap(const vkb_range *set, int n, const vkb_range *r) {
  for (int i = 0; i < n; i++)
    if (set[i].buf == r->buf && set[i].lo < r->hi && r->lo < set[i].hi) return true;
  return false;
}

/* The bytes a strided operand spans; false when it has no element. */
static bool operand_range(const ag_koperand *o, vkb_range *out) {
  if (!o->base) return false;
  int64_t lo = 0, hi = 0;
  for (int d = 0; d < o->ndim; d++) {
    if (o->shape[d] <= 0) return false;
    int64_t e = (o->shape[d] - 1) * o->strides[d];
    if (e < 0) lo += e;
    else hi += e;
  }
  size_t es = ag_dtype_size(o->dtype);
  if (!es) es = 8;
  const vkb_mem *m = o->base;
  int64_t off = (int64_t)o->offset;
  out->buf = m->buf;
  out->lo = (size_t)(off + lo * (int64_t)es < 0 ? 0 : off + lo * (int64_t)es);
  out->hi = (size_t)(off + (hi + 1) * (int64_t)es);
  return true;
}

/* The operands an op writes, a bit per slot: those kops.h gives the role
 * OUT, INOUT or SAVED; every operand for an op past the table. */
#define VKQ_W_IN 0u
#define VKQ_W_OPT 0u
#define VKQ_W_OUT 1u
#define VKQ_W_INOUT 1u
#define VKQ_W_SAVED 1u
#define VKQ_NO(...)
#define VKQ_WBIT(slot, nm, role, dt) | (VKQ_W_##role << (slot))
#define VKQ_WRITES(ID, ...) [AG_K_##ID] = 0u AGK_ARGS_##ID(VKQ_WBIT, VKQ_NO, VKQ_NO, VKQ_NO, VKQ_NO, VKQ_NO),
static uint32_t written_operands(ag_kop op) {
  static const uint32_t w[AG_KOP_COUNT] = {AG_KOPS(VKQ_WRITES)};
  return (unsigned)op < (unsigned)AG_KOP_COUNT ? w[op] : ~0u;
}

/* Sets the ranges of the launch about to be recorded (c NULL: none, and
 * every dispatch gets a barrier first). */
static void launch_begin(ag_bstream *s, const ag_kernel_call *c) {
  s->nlrd = s->nlwr = 0;
  s->lwr_all = false;
  s->ldispatches = -1;
  if (!c) return;
  s->ldispatches = 0;
  /* multi-tensor lists may hold up to AG_KMAX_MULTI tensors: unknown writes */
  s->lwr_all = c->multi != NULL;
  uint32_t wr = written_operands(c->op);
  for (int k = 0; k < c->n_operands && k < AG_KMAX_OPERANDS; k++) {
    vkb_range r;
    if (!operand_range(&c->o[k], &r)) continue;
    if ((wr >> k) & 1u) s->lwr[s->nlwr++] = r;
    else s->lrd[s->nlrd++] = r;
  }
}

/* Before a dispatch is recorded into cb: a barrier where it may depend on
 * what was recorded since the last one; then its ranges are tracked. */
static void before_dispatch(ag_bstream *s, VkCommandBuffer cb) {
  bool need = s->ldispatches != 0 || s->wr_all || (s->lwr_all && (s->nrd || s->nwr)) ||
              s->nrd + s->nlrd > VKB_TRACK || s->nwr + s->nlwr > VKB_TRACK;
  for (int i = 0; i < s->nlrd && !need; i++) need = any_overlap(s->wr, s->nwr, &s->lrd[i]);
  for (int i = 0; i < s->nlwr && !need; i++)
    need = any_overlap(s->wr, s->nwr, &s->lwr[i]) || any_overlap(s->rd, s->nrd, &s->lwr[i]);
  if (need) vkb_barrier(s, cb);
  atomic_fetch_add(&vkb_n_dispatches, 1);
  if (s->ldispatches < 0 || s->lwr_all) {
    s->wr_all = true;
    return;
  }
  s->ldispatches++;
  for (int i = 0; i < s->nlrd; i++) s->rd[s->nrd++] = s->lrd[i];
  for (int i = 0; i < s->nlwr; i++) s->wr[s->nwr++] = s->lwr[i];
}

ag_status vkb_stream_create(int dev, ag_bstream **out) {
  vkb_device *d = vkb_dev_open(dev);
  if (!d) return ag_last_status();
  ag_bstream *s = calloc(1, sizeof *s);
  if (!s) return ag_error_set(AG_ERR_OOM, "vulkan: stream");
  s->d = d;
  s->dev = dev;
  s->cur = -1;
  s->ldispatches = -1;
  pthread_mutex_init(&s->lock, NULL);
  ag_status st = AG_OK;
  VkResult r;
  VkCommandPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                 .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                 .queueFamilyIndex = d->qfamily};
  if ((r = d->f.vkCreateCommandPool(d->dev, &pci, NULL, &s->pool)) != VK_SUCCESS) {
    st = vkb_error(r, "vkCreateCommandPool");
    goto fail;
  }
  VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                    .commandPool = s->pool,
                                    .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                    .commandBufferCount = 1};
  for (int i = 0; i < VKB_BATCHES; i++)
    if ((r = d->f.vkAllocateCommandBuffers(d->dev, &ai, &s->b[i].cb)) != VK_SUCCESS ||
        (d->args_mode == VKB_ARGS_STAGED &&
         (r = d->f.vkAllocateCommandBuffers(d->dev, &ai, &s->b[i].pre)) != VK_SUCCESS)) {
      st = vkb_error(r, "vkAllocateCommandBuffers");
      goto fail;
    }
  s->tl = calloc(1, sizeof *s->tl);
  if (!s->tl) {
    st = ag_error_set(AG_ERR_OOM, "vulkan: timeline");
    goto fail;
  }
  s->tl->d = d;
  atomic_init(&s->tl->refs, 1);
  VkSemaphoreTypeCreateInfo ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                  .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                  .initialValue = 0};
  VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
  if ((r = d->f.vkCreateSemaphore(d->dev, &sci, NULL, &s->tl->sem)) != VK_SUCCESS) {
    free(s->tl);
    s->tl = NULL;
    st = vkb_error(r, "vkCreateSemaphore(timeline)");
    goto fail;
  }
  if ((st = vkb_mem_alloc(d, sizeof(ag_kernel_error), VKB_MEM_HOST, &s->err)) != AG_OK) goto fail;
  memset(s->err.map, 0, sizeof(ag_kernel_error));
  if ((st = vkb_mem_flush(d, &s->err, 0, sizeof(ag_kernel_error))) != AG_OK) goto fail;
  pthread_mutex_lock(&d->slock);
  s->next_on_dev = d->streams;
  d->streams = s;
  pthread_mutex_unlock(&d->slock);
  *out = s;
  return AG_OK;
fail:
  vkb_stream_destroy(s);
  return st;
}

void vkb_stream_destroy(ag_bstream *s) {
  if (!s) return;
  vkb_device *d = s->d;
  pthread_mutex_lock(&d->slock);
  for (ag_bstream **p = &d->streams; *p; p = &(*p)->next_on_dev)
    if (*p == s) {
      *p = s->next_on_dev;
      break;
    }
  pthread_mutex_unlock(&d->slock);
  if (s->tl) {
    vkb_flush(s);
    tl_wait(s->tl, s->value);
  }
  /* every batch has completed: the semaphores they waited on can go */
  for (int i = 0; i < VKB_BATCHES; i++) {
    batch_release_waits(&s->b[i]);
    vkb_mem_free(d, &s->b[i].arena);
    vkb_mem_free(d, &s->b[i].args);
    vkb_mem_free(d, &s->b[i].args_stage);
  }
  vkb_mem_free(d, &s->err);
  vkb_mem_free(d, &s->scratch);
  for (int i = 0; i < s->nwait; i++) tl_release(s->wait_tl[i]);
  if (s->qpool) d->f.vkDestroyQueryPool(d->dev, s->qpool, NULL);
  if (s->pool) d->f.vkDestroyCommandPool(d->dev, s->pool, NULL);
  tl_release(s->tl);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

void vkb_flush_device(vkb_device *d) {
  pthread_mutex_lock(&d->slock);
  for (ag_bstream *s = d->streams; s; s = s->next_on_dev) {
    pthread_mutex_lock(&s->lock);
    if (vkb_flush(s) != AG_OK) ag_error_clear(); /* the stream's next sync reports it */
    pthread_mutex_unlock(&s->lock);
  }
  pthread_mutex_unlock(&d->slock);
}

ag_status vkb_launch(ag_bstream *s, const ag_kernel_call *c) {
  if (c->struct_size < sizeof *c) return ag_kernel_call_check(c, sizeof *c, "vulkan");
  pthread_mutex_lock(&s->lock);
  launch_begin(s, c);
  ag_status st = vkb_launch_locked(s, c);
  launch_begin(s, NULL);
  pthread_mutex_unlock(&s->lock);
  return st;
}

/* Opens the next batch, waiting for its previous submit to complete. */
ag_status vkb_open(ag_bstream *s, vkb_batch **out) {
  if (s->cur >= 0) {
    *out = &s->b[s->cur];
    return AG_OK;
  }
  vkb_batch *b = &s->b[s->next];
  ag_status st = AG_OK;
  if (b->value && (st = tl_wait(s->tl, b->value)) != AG_OK) return st;
  batch_release_waits(b);
  if (!b->arena.buf && (st = vkb_mem_alloc(s->d, VKB_ARENA_BYTES, VKB_MEM_HOST, &b->arena)) != AG_OK) return st;
  int am = s->d->args_mode;
  if (am != VKB_ARGS_ARENA && !b->args.buf &&
      (st = vkb_mem_alloc(s->d, VKB_ARGS_BYTES, am == VKB_ARGS_MAPPED ? VKB_MEM_ARGS : VKB_MEM_SEGMENT,
                          &b->args)) != AG_OK)
    return st;
  if (am == VKB_ARGS_STAGED && !b->args_stage.buf &&
      (st = vkb_mem_alloc(s->d, VKB_ARGS_BYTES, VKB_MEM_HOST, &b->args_stage)) != AG_OK)
    return st;
  b->value = 0;
  b->used = 0;
  b->args_used = 0;
  b->commands = 0;
  VkResult r = s->d->f.vkResetCommandBuffer(b->cb, 0);
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  if (r == VK_SUCCESS) r = s->d->f.vkBeginCommandBuffer(b->cb, &bi);
  if (r != VK_SUCCESS) return vkb_error(r, "vkBeginCommandBuffer");
  s->cur = s->next;
  s->next = (s->next + 1) % VKB_BATCHES;
  *out = b;
  return AG_OK;
}

/* args_mode STAGED: the command buffer submitted ahead of the batch's,
 * copying its argument blocks from the staging buffer to the device-local
 * one. The copy waits for the earlier commands (the shaders of the batch
 * that last used the buffer read it; its last copy wrote it), and the
 * batch's shaders wait for the copy. */
static ag_status record_args_copy(ag_bstream *s, vkb_batch *b) {
  vkb_device *d = s->d;
  VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                 .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
  VkResult r = d->f.vkResetCommandBuffer(b->pre, 0);
  if (r == VK_SUCCESS) r = d->f.vkBeginCommandBuffer(b->pre, &bi);
  if (r != VK_SUCCESS) return vkb_error(r, "vkBeginCommandBuffer");
  VkMemoryBarrier before = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                            .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                            .dstAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT};
  d->f.vkCmdPipelineBarrier(b->pre, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                            VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, NULL, 0, NULL);
  VkBufferCopy c = {.srcOffset = 0, .dstOffset = 0, .size = b->args_used};
  d->f.vkCmdCopyBuffer(b->pre, b->args_stage.buf, b->args.buf, 1, &c);
  VkMemoryBarrier after = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                           .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT,
                           .dstAccessMask = VK_ACCESS_SHADER_READ_BIT};
  d->f.vkCmdPipelineBarrier(b->pre, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                            &after, 0, NULL, 0, NULL);
  r = d->f.vkEndCommandBuffer(b->pre);
  return r == VK_SUCCESS ? AG_OK : vkb_error(r, "vkEndCommandBuffer");
}

/* Submits the open batch (if any) with the pending semaphore waits. */
ag_status vkb_flush(ag_bstream *s) {
  if (s->cur < 0) return AG_OK;
  vkb_batch *b = &s->b[s->cur];
  vkb_device *d = s->d;
  s->cur = -1;
  /* what the batch wrote becomes visible to the host once it signals */
  VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        .dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_HOST_WRITE_BIT};
  d->f.vkCmdPipelineBarrier(b->cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                            VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
  VkResult r = d->f.vkEndCommandBuffer(b->cb);
  if (r != VK_SUCCESS) return vkb_error(r, "vkEndCommandBuffer");
  /* the argument blocks and staged uploads the host wrote */
  ag_status st = vkb_mem_flush(d, &b->arena, 0, b->used);
  if (st == AG_OK && b->args_used)
    st = vkb_mem_flush(d, d->args_mode == VKB_ARGS_STAGED ? &b->args_stage : &b->args, 0, b->args_used);
  if (st != AG_OK) return st;
  bool pre = d->args_mode == VKB_ARGS_STAGED && b->args_used;
  if (pre && (st = record_args_copy(s, b)) != AG_OK) return st;
  VkCommandBuffer cbs[2] = {b->pre, b->cb};
  uint64_t signal = s->value + 1;
  VkSemaphore waits[VKB_WAITS];
  VkPipelineStageFlags stages[VKB_WAITS];
  for (int i = 0; i < s->nwait; i++) {
    waits[i] = s->wait_tl[i]->sem;
    stages[i] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
  }
  /* wait arrays only with a non-zero count */
  bool w = s->nwait > 0;
  VkTimelineSemaphoreSubmitInfo ts = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                      .waitSemaphoreValueCount = (uint32_t)s->nwait,
                                      .pWaitSemaphoreValues = w ? s->wait_v : NULL,
                                      .signalSemaphoreValueCount = 1,
                                      .pSignalSemaphoreValues = &signal};
  VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                     .pNext = &ts,
                     .waitSemaphoreCount = (uint32_t)s->nwait,
                     .pWaitSemaphores = w ? waits : NULL,
                     .pWaitDstStageMask = w ? stages : NULL,
                     .commandBufferCount = pre ? 2 : 1,
                     .pCommandBuffers = pre ? cbs : &b->cb,
                     .signalSemaphoreCount = 1,
                     .pSignalSemaphores = &s->tl->sem};
  pthread_mutex_lock(&d->qlock);
  r = d->f.vkQueueSubmit(d->queue, 1, &si, VK_NULL_HANDLE);
  pthread_mutex_unlock(&d->qlock);
  /* the batch holds the wait references until it has completed (vkb_open,
   * stream destruction); a failed submit is not pending and drops them */
  for (int i = 0; i < s->nwait; i++) b->wait_tl[i] = s->wait_tl[i];
  b->nwait = s->nwait;
  s->nwait = 0;
  if (r != VK_SUCCESS) {
    batch_release_waits(b);
    return vkb_error(r, "vkQueueSubmit");
  }
  s->value = signal;
  b->value = signal;
  return AG_OK;
}

ag_status vkb_arena(ag_bstream *s, size_t bytes, vkb_batch **out_b, void **out_host, uint64_t *out_addr,
                    VkBuffer *out_buf, size_t *out_off) {
  vkb_batch *b = NULL;
  ag_status st = vkb_open(s, &b);
  if (st != AG_OK) return st;
  size_t at = (b->used + 15) & ~(size_t)15;
  if (at + bytes > b->arena.bytes) {
    if ((st = vkb_flush(s)) != AG_OK || (st = vkb_open(s, &b)) != AG_OK) return st;
    at = 0;
  }
  b->used = at + bytes;
  *out_b = b;
  *out_host = (char *)b->arena.map + at;
  if (out_addr) *out_addr = b->arena.addr + at;
  if (out_buf) *out_buf = b->arena.buf;
  if (out_off) *out_off = at;
  return AG_OK;
}

/* A batch is submitted after this many commands, so the device starts
 * while the host records more. */
static ag_status after_command(ag_bstream *s, vkb_batch *b) {
  return ++b->commands >= VKB_BATCH_COMMANDS ? vkb_flush(s) : AG_OK;
}

/* Room for one argument block in the open batch (d->args_mode): host
 * pointer to write it and the device address the shader reads. */
static ag_status args_block(ag_bstream *s, vkb_batch **out_b, void **out_host, uint64_t *out_addr) {
  vkb_device *d = s->d;
  if (d->args_mode == VKB_ARGS_ARENA) return vkb_arena(s, sizeof(vkb_args), out_b, out_host, out_addr, NULL, NULL);
  vkb_batch *b = NULL;
  ag_status st = vkb_open(s, &b);
  if (st != AG_OK) return st;
  if (b->args_used + sizeof(vkb_args) > b->args.bytes) {
    if ((st = vkb_flush(s)) != AG_OK || (st = vkb_open(s, &b)) != AG_OK) return st;
  }
  size_t at = b->args_used;
  b->args_used += sizeof(vkb_args);
  *out_b = b;
  *out_host = (char *)(d->args_mode == VKB_ARGS_STAGED ? b->args_stage.map : b->args.map) + at;
  *out_addr = b->args.addr + at;
  return AG_OK;
}

ag_status vkb_dispatch(ag_bstream *s, vkb_shader sh, int spec, const vkb_args *a, uint32_t gx, uint32_t gy,
                       uint32_t gz) {
  if (!gx || !gy || !gz) return AG_OK;
  VkPipeline p;
  ag_status st = vkb_pipeline(s->d, sh, spec, &p);
  if (st != AG_OK) return st;
  vkb_batch *b = NULL;
  void *host;
  uint64_t addr;
  if ((st = args_block(s, &b, &host, &addr)) != AG_OK) return st;
  memcpy(host, a, sizeof *a);
  before_dispatch(s, b->cb);
  s->d->f.vkCmdBindPipeline(b->cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
  s->d->f.vkCmdPushConstants(b->cb, s->d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof addr, &addr);
  s->d->f.vkCmdDispatch(b->cb, gx, gy, gz);
  return after_command(s, b);
}

ag_status vkb_dispatch1(ag_bstream *s, vkb_shader sh, int spec, const vkb_args *a, int64_t items) {
  if (items <= 0) return AG_OK;
  uint64_t groups = ((uint64_t)items + VKB_WG - 1) / VKB_WG;
  uint64_t maxx = s->d->props.limits.maxComputeWorkGroupCount[0];
  uint64_t gx = groups < maxx ? groups : maxx, gy = (groups + gx - 1) / gx;
  if (gy > s->d->props.limits.maxComputeWorkGroupCount[1])
    return ag_error_set(AG_ERR_UNSUPPORTED, "vulkan: %lld invocations exceed the device's dispatch limits",
                        (long long)items);
  return vkb_dispatch(s, sh, spec, a, (uint32_t)gx, (uint32_t)gy, 1);
}

ag_status vkb_scratch(ag_bstream *s, size_t bytes, uint64_t *out_addr) {
  /* the launch writes the scratch buffer (after it is grown) */
  bool track = s->ldispatches >= 0;
  if (bytes > s->scratch.bytes) {
    /* the old buffer may be in use by submitted work */
    ag_status st = vkb_stream_synchronize_l(s);
    if (st != AG_OK) return st;
    vkb_mem_free(s->d, &s->scratch);
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes + bytes / 4;
    if (want > s->d->max_alloc || want > s->d->max_buffer) want = bytes;
    if ((st = vkb_mem_alloc(s->d, want, VKB_MEM_SEGMENT, &s->scratch)) != AG_OK) return st;
  }
  *out_addr = s->scratch.addr;
  if (track && s->nlwr < VKB_LAUNCH_RANGES) s->lwr[s->nlwr++] = (vkb_range){s->scratch.buf, 0, s->scratch.bytes};
  else if (track) s->lwr_all = true;
  return AG_OK;
}

static ag_status vkb_stream_synchronize_l(ag_bstream *s) {
  ag_status st = vkb_flush(s);
  if (st == AG_OK) st = tl_wait(s->tl, s->value);
  if (st == AG_OK) st = vkb_validation_status();
  return st;
}

static ag_status vkb_stream_query_l(ag_bstream *s, bool *out_done) {
  ag_status st = vkb_flush(s);
  if (st != AG_OK) return st;
  *out_done = tl_value(s->tl) >= s->value;
  return AG_OK;
}

ag_status vkb_event_create(int dev, bool timing, ag_bevent **out) {
  vkb_device *d = vkb_dev_open(dev);
  if (!d) return ag_last_status();
  ag_bevent *e = calloc(1, sizeof *e);
  if (!e) return ag_error_set(AG_ERR_OOM, "vulkan: event");
  e->d = d;
  e->timing = timing && e->d->timestamps;
  *out = e;
  return AG_OK;
}

void vkb_event_destroy(ag_bevent *e) {
  if (!e) return;
  tl_release(e->tl);
  free(e);
}

/* Timing events write a timestamp into the stream's query pool (a ring of
 * 1024 queries); the stamp is read when the event is complete. */
static ag_status record_stamp(ag_bevent *e, ag_bstream *s) {
  vkb_device *d = s->d;
  if (!s->qpool) {
    VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                .queryType = VK_QUERY_TYPE_TIMESTAMP,
                                .queryCount = 1024};
    VkResult r = d->f.vkCreateQueryPool(d->dev, &qi, NULL, &s->qpool);
    if (r != VK_SUCCESS) return vkb_error(r, "vkCreateQueryPool");
    s->qcount = 1024;
  }
  vkb_batch *b = NULL;
  ag_status st = vkb_open(s, &b);
  if (st != AG_OK) return st;
  uint32_t q = s->qnext;
  s->qnext = (s->qnext + 1) % s->qcount;
  d->f.vkCmdResetQueryPool(b->cb, s->qpool, q, 1);
  d->f.vkCmdWriteTimestamp(b->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, s->qpool, q);
  e->ts_stream = s;
  e->query = q;
  e->have_stamp = false;
  return AG_OK;
}

static ag_status vkb_event_record_l(ag_bevent *e, ag_bstream *s) {
  ag_status st = AG_OK;
  if (e->timing && (st = record_stamp(e, s)) != AG_OK) return st;
  /* an event on a stream with nothing queued still needs a value: an empty
   * batch is submitted so that the value exists */
  if (s->cur < 0 && s->value == 0) {
    vkb_batch *b;
    if ((st = vkb_open(s, &b)) != AG_OK) return st;
  }
  if ((st = vkb_flush(s)) != AG_OK) return st;
  atomic_fetch_add(&s->tl->refs, 1);
  tl_release(e->tl);
  e->tl = s->tl;
  e->value = s->value;
  return AG_OK;
}

static ag_status vkb_stream_wait_event_l(ag_bstream *s, ag_bevent *e) {
  if (!e->tl || e->tl == s->tl) return AG_OK; /* same stream: in order already */
  ag_status st = vkb_flush(s);
  if (st != AG_OK) return st;
  for (int i = 0; i < s->nwait; i++)
    if (s->wait_tl[i] == e->tl) {
      if (e->value > s->wait_v[i]) s->wait_v[i] = e->value;
      return AG_OK;
    }
  if (s->nwait == VKB_WAITS) {
    /* more distinct streams than slots: wait on the host instead */
    return tl_wait(e->tl, e->value);
  }
  atomic_fetch_add(&e->tl->refs, 1);
  s->wait_tl[s->nwait] = e->tl;
  s->wait_v[s->nwait++] = e->value;
  return AG_OK;
}

ag_status vkb_event_query(ag_bevent *e, bool *out_done) {
  *out_done = !e->tl || tl_value(e->tl) >= e->value;
  return AG_OK;
}

ag_status vkb_event_synchronize(ag_bevent *e) {
  ag_status st = e->tl ? tl_wait(e->tl, e->value) : AG_OK;
  if (st == AG_OK) st = vkb_validation_status();
  return st;
}

static ag_status read_stamp(ag_bevent *e) {
  if (e->have_stamp) return AG_OK;
  if (!e->tl || tl_value(e->tl) < e->value) return ag_error_set(AG_ERR_STATE, "vulkan: event not complete");
  vkb_device *d = e->d;
  uint64_t v = 0;
  VkResult r = d->f.vkGetQueryPoolResults(d->dev, e->ts_stream->qpool, e->query, 1, sizeof v, &v, sizeof v,
                                          VK_QUERY_RESULT_64_BIT);
  if (r != VK_SUCCESS) return vkb_error(r, "vkGetQueryPoolResults");
  e->stamp = v & d->ts_mask;
  e->have_stamp = true;
  return AG_OK;
}

ag_status vkb_event_elapsed_ms(ag_bevent *a, ag_bevent *b, float *out_ms) {
  if (!a->timing || !b->timing)
    return ag_error_set(AG_ERR_INVALID, "vulkan: elapsed time needs timing events (and device timestamps)");
  if (!a->tl || !b->tl) return ag_error_set(AG_ERR_STATE, "vulkan: event not recorded");
  ag_status st = read_stamp(a);
  if (st == AG_OK) st = read_stamp(b);
  if (st != AG_OK) return st;
  *out_ms = (float)((double)(int64_t)(b->stamp - a->stamp) * a->d->ts_period_ns * 1e-6);
  return AG_OK;
}

static ag_status record_copy(ag_bstream *s, VkBuffer src, size_t soff, VkBuffer dst, size_t doff, size_t bytes) {
  vkb_batch *b = NULL;
  ag_status st = vkb_open(s, &b);
  if (st != AG_OK) return st;
  VkBufferCopy r = {.srcOffset = soff, .dstOffset = doff, .size = bytes};
  /* copies wait for everything recorded since the last barrier, and
   * everything after them waits for them */
  if (s->nrd || s->nwr || s->wr_all) vkb_barrier(s, b->cb);
  s->d->f.vkCmdCopyBuffer(b->cb, src, dst, 1, &r);
  vkb_barrier(s, b->cb);
  return after_command(s, b);
}

static ag_status vkb_copy_h2d_l(ag_bstream *s, void *dst, size_t doff, const void *src, size_t bytes, bool pinned) {
  if (!bytes) return AG_OK;
  const vkb_mem *dm = dst;
  size_t poff = 0;
  vkb_mem pm;
  if (pinned && vkb_pinned_find(src, bytes, &pm, &poff)) return record_copy(s, pm.buf, poff, dm->buf, doff, bytes);
  /* pageable: staged through the batch arenas, consumed before returning */
  const char *p = src;
  ag_status st = AG_OK;
  while (bytes && st == AG_OK) {
    size_t n = bytes < VKB_ARENA_BYTES / 2 ? bytes : VKB_ARENA_BYTES / 2;
    vkb_batch *b;
    void *host;
    VkBuffer buf;
    size_t off;
    if ((st = vkb_arena(s, n, &b, &host, NULL, &buf, &off)) != AG_OK) break;
    memcpy(host, p, n);
    st = record_copy(s, buf, off, dm->buf, doff, n);
    p += n;
    doff += n;
    bytes -= n;
  }
  return st;
}

static ag_status vkb_copy_d2h_l(ag_bstream *s, void *dst, const void *src, size_t soff, size_t bytes) {
  if (!bytes) return AG_OK;
  const vkb_mem *sm = src;
  size_t poff = 0;
  vkb_mem pm;
  if (vkb_pinned_find(dst, bytes, &pm, &poff)) return record_copy(s, sm->buf, soff, pm.buf, poff, bytes);
  /* pageable: completes before returning */
  ag_status st = vkb_stream_synchronize_l(s);
  if (st != AG_OK) return st;
  if (sm->map) {
    /* mapped segment memory: invalidated first where it is not coherent */
    vkb_mem *mm = (vkb_mem *)sm;
    if ((st = vkb_mem_invalidate(s->d, mm, soff, bytes)) != AG_OK) return st;
    memcpy(dst, (const char *)sm->map + soff, bytes);
    return AG_OK;
  }
  char *p = dst;
  while (bytes && st == AG_OK) {
    size_t n = bytes < VKB_ARENA_BYTES / 2 ? bytes : VKB_ARENA_BYTES / 2;
    vkb_batch *b;
    void *host;
    VkBuffer buf;
    size_t off;
    if ((st = vkb_arena(s, n, &b, &host, NULL, &buf, &off)) != AG_OK) break;
    if ((st = record_copy(s, sm->buf, soff, buf, off, n)) != AG_OK) break;
    if ((st = vkb_stream_synchronize_l(s)) != AG_OK) break;
    if ((st = vkb_mem_invalidate(s->d, &b->arena, off, n)) != AG_OK) break;
    memcpy(p, host, n);
    p += n;
    soff += n;
    bytes -= n;
  }
  return st;
}

static ag_status vkb_copy_d2d_l(ag_bstream *s, void *dst, size_t doff, const void *src, size_t soff, size_t bytes) {
  if (!bytes) return AG_OK;
  const vkb_mem *sm = src, *dm = dst;
  if (sm == dm && soff < doff + bytes && doff < soff + bytes) {
    /* overlapping regions of one buffer are invalid in one vkCmdCopyBuffer:
     * through the stream's scratch buffer */
    if (soff == doff) return AG_OK;
    uint64_t unused;
    ag_status st = vkb_scratch(s, bytes, &unused);
    if (st == AG_OK) st = record_copy(s, sm->buf, soff, s->scratch.buf, 0, bytes);
    if (st == AG_OK) st = record_copy(s, s->scratch.buf, 0, dm->buf, doff, bytes);
    return st;
  }
  return record_copy(s, sm->buf, soff, dm->buf, doff, bytes);
}

/* The error word is host-visible. The core also asks right after
 * launches: while work that may set it is queued or running, nothing is
 * read (and the word stays armed for the next sync). */
static ag_status vkb_take_kernel_error_l(ag_bstream *s, ag_kernel_error *out) {
  memset(out, 0, sizeof *out);
  if (!s->err_armed || s->cur >= 0 || tl_value(s->tl) < s->value) return AG_OK;
  ag_status st = vkb_mem_invalidate(s->d, &s->err, 0, sizeof *out);
  if (st != AG_OK) return st;
  memcpy(out, s->err.map, sizeof *out);
  s->err_armed = false;
  if (out->code) {
    memset(s->err.map, 0, sizeof *out);
    st = vkb_mem_flush(s->d, &s->err, 0, sizeof *out);
  }
  return st;
}

/* ---- the vtable entries: each holds the stream's lock ---- */
#define VKB_LOCKED(s, call)            \
  do {                                 \
    pthread_mutex_lock(&(s)->lock);    \
    ag_status st_ = (call);            \
    pthread_mutex_unlock(&(s)->lock);  \
    return st_;                        \
  } while (0)

ag_status vkb_stream_synchronize(ag_bstream *s) { VKB_LOCKED(s, vkb_stream_synchronize_l(s)); }
ag_status vkb_stream_query(ag_bstream *s, bool *out_done) { VKB_LOCKED(s, vkb_stream_query_l(s, out_done)); }
ag_status vkb_event_record(ag_bevent *e, ag_bstream *s) { VKB_LOCKED(s, vkb_event_record_l(e, s)); }
ag_status vkb_stream_wait_event(ag_bstream *s, ag_bevent *e) { VKB_LOCKED(s, vkb_stream_wait_event_l(s, e)); }
ag_status vkb_copy_h2d(ag_bstream *s, void *dst, size_t doff, const void *src, size_t bytes, bool pinned) {
  VKB_LOCKED(s, vkb_copy_h2d_l(s, dst, doff, src, bytes, pinned));
}
ag_status vkb_copy_d2h(ag_bstream *s, void *dst, const void *src, size_t soff, size_t bytes) {
  VKB_LOCKED(s, vkb_copy_d2h_l(s, dst, src, soff, bytes));
}
ag_status vkb_copy_d2d(ag_bstream *s, void *dst, size_t doff, const void *src, size_t soff, size_t bytes) {
  VKB_LOCKED(s, vkb_copy_d2d_l(s, dst, doff, src, soff, bytes));
}
ag_status vkb_take_kernel_error(ag_bstream *s, ag_kernel_error *out) { VKB_LOCKED(s, vkb_take_kernel_error_l(s, out)); }
