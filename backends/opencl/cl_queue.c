/* Streams are in-order command queues with profiling enabled; events are
 * markers; cross-queue waits are barriers with a wait list. Each stream owns
 * the error word its kernels write and a grow-only scratch buffer. Threads
 * may share a stream: its flags change under s->lock. */
#include <stdlib.h>
#include <string.h>

#include "cl_internal.h"

ag_status clb_stream_create(int dev, ag_bstream **out) {
  clb_device *d = clb_dev(dev);
  ag_bstream *s = calloc(1, sizeof *s);
  if (!s) return ag_error_set(AG_ERR_OOM, "opencl: stream");
  s->d = d;
  s->dev = dev;
  s->k = s->kset[0];
  s->kwg = s->kwgset[0];
  pthread_mutex_init(&s->lock, NULL);
  cl_int err;
  s->q = clCreateCommandQueue(d->ctx, d->id, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!s->q) {
    pthread_mutex_destroy(&s->lock);
    free(s);
    return clb_error(err, "clCreateCommandQueue");
  }
  ag_kernel_error zero = {0};
  s->err = clCreateBuffer(d->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero, &zero,
                          &err);
  if (!s->err) {
    clReleaseCommandQueue(s->q);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return clb_error(err, "clCreateBuffer(error word)");
  }
  *out = s;
  return AG_OK;
}

void clb_stream_destroy(ag_bstream *s) {
  if (!s) return;
  clFinish(s->q);
  if (s->probe) clReleaseEvent(s->probe);
  for (int p = 0; p < 2; p++)
    for (int i = 0; i < CLK_COUNT; i++)
      if (s->kset[p][i]) clReleaseKernel(s->kset[p][i]);
  if (s->scratch) clReleaseMemObject(s->scratch);
  clReleaseMemObject(s->err);
  clReleaseCommandQueue(s->q);
  pthread_mutex_destroy(&s->lock);
  free(s);
}

/* Marks work enqueued on s. Called after the enqueue: a synchronize that
 * runs meanwhile then keeps busy set instead of clearing it for work it
 * did not wait for. */
static void touch(ag_bstream *s) {
  pthread_mutex_lock(&s->lock);
  clb_touch(s);
  pthread_mutex_unlock(&s->lock);
}

ag_status clb_stream_synchronize(ag_bstream *s) {
  pthread_mutex_lock(&s->lock);
  unsigned long before = s->enqueued;
  pthread_mutex_unlock(&s->lock);
  cl_int err = clFinish(s->q);
  if (err != CL_SUCCESS) return clb_error(err, "clFinish");
  pthread_mutex_lock(&s->lock);
  if (s->enqueued == before) s->busy = false;
  pthread_mutex_unlock(&s->lock);
  return AG_OK;
}

/* A marker enqueued after the last work tells, without blocking, whether it
 * all finished; it is reused by later queries until more work is queued. */
static ag_status query_locked(ag_bstream *s, bool *out_done) {
  *out_done = true;
  if (!s->busy) return AG_OK;
  cl_int err;
  if (!s->probe || s->since_probe) {
    if (s->probe) clReleaseEvent(s->probe);
    s->probe = NULL;
    err = clEnqueueMarkerWithWaitList(s->q, 0, NULL, &s->probe);
    if (err != CL_SUCCESS) return clb_error(err, "clEnqueueMarkerWithWaitList");
    s->since_probe = false;
    clFlush(s->q);
  }
  cl_int st = CL_QUEUED;
  err = clGetEventInfo(s->probe, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  if (err != CL_SUCCESS) return clb_error(err, "clGetEventInfo");
  if (st < 0) return clb_error(st, "stream query");
  *out_done = st == CL_COMPLETE;
  if (*out_done) s->busy = false;
  return AG_OK;
}

ag_status clb_stream_query(ag_bstream *s, bool *out_done) {
  pthread_mutex_lock(&s->lock);
  ag_status st = query_locked(s, out_done);
  pthread_mutex_unlock(&s->lock);
  return st;
}

ag_status clb_scratch(ag_bstream *s, size_t bytes, cl_mem *out) {
  if (bytes > s->scratch_bytes) {
    /* Releasing is deferred by OpenCL until queued kernels using the old
     * buffer have finished, so growing never waits. */
    if (s->scratch) clReleaseMemObject(s->scratch);
    s->scratch = NULL;
    s->scratch_bytes = 0;
    size_t want = bytes < (1u << 20) ? (1u << 20) : bytes + bytes / 4;
    if (want > s->d->max_alloc) want = bytes;
    cl_int err;
    s->scratch = clCreateBuffer(s->d->ctx, CL_MEM_READ_WRITE, want, NULL, &err);
    if (!s->scratch) return clb_error(err, "clCreateBuffer(scratch)");
    s->scratch_bytes = want;
  }
  *out = s->scratch;
  return AG_OK;
}

ag_status clb_event_create(int dev, bool timing, ag_bevent **out) {
  ag_bevent *e = calloc(1, sizeof *e);
  if (!e) return ag_error_set(AG_ERR_OOM, "opencl: event");
  e->d = clb_dev(dev);
  e->timing = timing;
  *out = e;
  return AG_OK;
}

void clb_event_destroy(ag_bevent *e) {
  if (!e) return;
  if (e->ev) clReleaseEvent(e->ev);
  free(e);
}

ag_status clb_event_record(ag_bevent *e, ag_bstream *s) {
  cl_event ev;
  cl_int err = clEnqueueMarkerWithWaitList(s->q, 0, NULL, &ev);
  if (err != CL_SUCCESS) return clb_error(err, "clEnqueueMarkerWithWaitList");
  touch(s);
  /* Flushed so that queries and other queues waiting on it make progress. */
  clFlush(s->q);
  if (e->ev) clReleaseEvent(e->ev);
  e->ev = ev;
  return AG_OK;
}

ag_status clb_stream_wait_event(ag_bstream *s, ag_bevent *e) {
  if (!e->ev) return AG_OK;
  cl_int err = clEnqueueBarrierWithWaitList(s->q, 1, &e->ev, NULL);
  if (err != CL_SUCCESS) return clb_error(err, "clEnqueueBarrierWithWaitList");
  touch(s);
  return AG_OK;
}

ag_status clb_event_query(ag_bevent *e, bool *out_done) {
  if (!e->ev) {
    *out_done = true;
    return AG_OK;
  }
  cl_int st = CL_QUEUED;
  cl_int err = clGetEventInfo(e->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL);
  if (err != CL_SUCCESS) return clb_error(err, "clGetEventInfo");
  if (st < 0) return clb_error(st, "event");
  *out_done = st == CL_COMPLETE;
  return AG_OK;
}

ag_status clb_event_synchronize(ag_bevent *e) {
  if (!e->ev) return AG_OK;
  cl_int err = clWaitForEvents(1, &e->ev);
  return err == CL_SUCCESS ? AG_OK : clb_error(err, "clWaitForEvents");
}

ag_status clb_event_elapsed_ms(ag_bevent *a, ag_bevent *b, float *out_ms) {
  if (!a->timing || !b->timing)
    return ag_error_set(AG_ERR_INVALID, "opencl: elapsed time needs timing events");
  if (!a->ev || !b->ev) return ag_error_set(AG_ERR_STATE, "opencl: event not recorded");
  cl_ulong ta = 0, tb = 0;
  cl_int err = clGetEventProfilingInfo(a->ev, CL_PROFILING_COMMAND_END, sizeof ta, &ta, NULL);
  if (err == CL_SUCCESS)
    err = clGetEventProfilingInfo(b->ev, CL_PROFILING_COMMAND_END, sizeof tb, &tb, NULL);
  if (err == CL_PROFILING_INFO_NOT_AVAILABLE)
    return ag_error_set(AG_ERR_STATE, "opencl: event not complete");
  if (err != CL_SUCCESS) return clb_error(err, "clGetEventProfilingInfo");
  *out_ms = (float)((double)((int64_t)(tb - ta)) * 1e-6);
  return AG_OK;
}

ag_status clb_copy_h2d(ag_bstream *s, void *dst, size_t doff, const void *src, size_t bytes,
                       bool pinned) {
  if (!bytes) return AG_OK;
  /* Pageable sources are consumed before returning (blocking write). */
  cl_int err = clEnqueueWriteBuffer(s->q, (cl_mem)dst, pinned ? CL_FALSE : CL_TRUE, doff, bytes,
                                    src, 0, NULL, NULL);
  if (err != CL_SUCCESS) return clb_error(err, "clEnqueueWriteBuffer");
  touch(s);
  if (pinned) clFlush(s->q);
  return AG_OK;
}

ag_status clb_copy_d2h(ag_bstream *s, void *dst, const void *src, size_t soff, size_t bytes) {
  if (!bytes) return AG_OK;
  cl_int err = clEnqueueReadBuffer(s->q, (cl_mem)src, CL_FALSE, soff, bytes, dst, 0, NULL, NULL);
  if (err != CL_SUCCESS) return clb_error(err, "clEnqueueReadBuffer");
  touch(s);
  clFlush(s->q);
  return AG_OK;
}

ag_status clb_copy_d2d(ag_bstream *s, void *dst, size_t doff, const void *src, size_t soff,
                       size_t bytes) {
  if (!bytes) return AG_OK;
  cl_int err = clEnqueueCopyBuffer(s->q, (cl_mem)src, (cl_mem)dst, soff, doff, bytes, 0, NULL,
                                   NULL);
  if (err != CL_SUCCESS) return clb_error(err, "clEnqueueCopyBuffer");
  touch(s);
  return AG_OK;
}

/* Only read when a kernel that can fail ran since the last take, so a
 * training step's syncs cost no extra transfer. The core calls this after a
 * stream sync, so the blocking read does not wait on queued work. */
static ag_status take_locked(ag_bstream *s, ag_kernel_error *out) {
  if (!s->err_armed) return AG_OK;
  cl_int err = clEnqueueReadBuffer(s->q, s->err, CL_TRUE, 0, sizeof *out, out, 0, NULL, NULL);
  if (err != CL_SUCCESS) return clb_error(err, "clEnqueueReadBuffer(error word)");
  s->err_armed = false;
  if (out->code) {
    ag_kernel_error zero = {0};
    err = clEnqueueWriteBuffer(s->q, s->err, CL_TRUE, 0, sizeof zero, &zero, 0, NULL, NULL);
    if (err != CL_SUCCESS) return clb_error(err, "clEnqueueWriteBuffer(error word)");
  }
  return AG_OK;
}

ag_status clb_take_kernel_error(ag_bstream *s, ag_kernel_error *out) {
  memset(out, 0, sizeof *out);
  pthread_mutex_lock(&s->lock);
  ag_status st = take_locked(s, out);
  pthread_mutex_unlock(&s->lock);
  return st;
}
