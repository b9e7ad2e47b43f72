/* Learning-rate schedules as values: closed forms of
 * torch.optim.lr_scheduler's StepLR, MultiStepLR, LinearLR,
 * CosineAnnealingLR, CosineAnnealingWarmRestarts and OneCycleLR, with an
 * optional linear warmup in front (SequentialLR), and ag_lr_cosine. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "anygrad/optim.h"
#include "anygrad/status.h"

ag_schedule ag_schedule_constant(double lr) { return (ag_schedule){.kind = AG_SCHED_CONSTANT, .lr = lr}; }

ag_schedule ag_schedule_step(double lr, int64_t step_size, double gamma) {
  return (ag_schedule){.kind = AG_SCHED_STEP, .lr = lr, .step_size = step_size, .gamma = gamma};
}

ag_schedule ag_schedule_multistep(double lr, int n_milestones, const int64_t *milestones, double gamma) {
  ag_schedule s = {.kind = AG_SCHED_MULTISTEP, .lr = lr, .gamma = gamma, .n_milestones = n_milestones};
  if (milestones)
    for (int i = 0; i < n_milestones && i < AG_SCHEDULE_MAX_MILESTONES; i++) s.milestones[i] = milestones[i];
  else if (n_milestones > 0)
    s.n_milestones = -1; /* reported by ag_schedule_lr */
  return s;
}

ag_schedule ag_schedule_linear(double lr, double start_factor, double end_factor, int64_t total) {
  return (ag_schedule){
      .kind = AG_SCHED_LINEAR, .lr = lr, .start_factor = start_factor, .end_factor = end_factor, .total = total};
}

ag_schedule ag_schedule_cosine(double lr, double lr_min, int64_t total) {
  return (ag_schedule){.kind = AG_SCHED_COSINE, .lr = lr, .lr_min = lr_min, .total = total};
}

ag_schedule ag_schedule_cosine_restarts(double lr, double lr_min, int64_t period, int64_t period_mult) {
  return (ag_schedule){
      .kind = AG_SCHED_COSINE_RESTARTS, .lr = lr, .lr_min = lr_min, .period = period, .period_mult = period_mult};
}

ag_schedule ag_schedule_one_cycle(double max_lr, int64_t total, double pct_start, double div_factor,
                                  double final_div_factor) {
  return (ag_schedule){.kind = AG_SCHED_ONE_CYCLE,
                       .lr = max_lr,
                       .total = total,
                       .pct_start = pct_start,
                       .div_factor = div_factor,
                       .final_div_factor = final_div_factor};
}

ag_schedule ag_schedule_with_warmup(ag_schedule s, int64_t warmup, double start_factor) {
  s.warmup = warmup;
  s.warmup_start_factor = start_factor;
  return s;
}

static bool fin_nonneg(double v) { return v >= 0 && !isinf(v); }

static double bad(const char *what, double v) {
  ag_error_set(AG_ERR_INVALID, "ag_schedule_lr: %s (got %g)", what, v);
  return NAN;
}

static double cos_anneal(double start, double end, double pct) {
  return end + (start - end) / 2.0 * (cos(M_PI * pct) + 1.0);
}

static double refuse(bool *ok, const char *what, double v) {
  *ok = false;
  return bad(what, v);
}

/* *ok turns false when an argument is refused (the error is set). */
static double main_lr(const ag_schedule *s, int64_t step, bool *ok) {
  switch (s->kind) {
  case AG_SCHED_CONSTANT:
    return s->lr;
  case AG_SCHED_STEP:
    if (s->step_size < 1) return refuse(ok, "step_size must be >= 1", (double)s->step_size);
    if (!fin_nonneg(s->gamma)) return refuse(ok, "gamma must be finite and >= 0", s->gamma);
    return s->lr * pow(s->gamma, (double)(step / s->step_size));
  case AG_SCHED_MULTISTEP: {
    if (s->n_milestones < 0 || s->n_milestones > AG_SCHEDULE_MAX_MILESTONES)
      return refuse(ok, "n_milestones must be 0..16 with a milestone array", (double)s->n_milestones);
    if (!fin_nonneg(s->gamma)) return refuse(ok, "gamma must be finite and >= 0", s->gamma);
    int k = 0;
    for (int i = 0; i < s->n_milestones; i++) {
      if (s->milestones[i] < 0) return refuse(ok, "milestones must be >= 0", (double)s->milestones[i]);
      if (i && s->milestones[i] <= s->milestones[i - 1])
        return refuse(ok, "milestones must be increasing", (double)s->milestones[i]);
      if (s->milestones[i] <= step) k = i + 1;
    }
    return s->lr * pow(s->gamma, k);
  }
  case AG_SCHED_LINEAR: {
    if (s->total < 1) return refuse(ok, "total must be >= 1", (double)s->total);
    if (!fin_nonneg(s->start_factor)) return refuse(ok, "start_factor must be finite and >= 0", s->start_factor);
    if (!fin_nonneg(s->end_factor)) return refuse(ok, "end_factor must be finite and >= 0", s->end_factor);
    int64_t t = step < s->total ? step : s->total;
    return s->lr * (s->start_factor + (s->end_factor - s->start_factor) * (double)t / (double)s->total);
  }
  case AG_SCHED_COSINE:
    if (s->total < 1) return refuse(ok, "total must be >= 1", (double)s->total);
    if (!fin_nonneg(s->lr_min)) return refuse(ok, "lr_min must be finite and >= 0", s->lr_min);
    if (step >= s->total) return s->lr_min;
    return cos_anneal(s->lr, s->lr_min, (double)step / (double)s->total);
  case AG_SCHED_COSINE_RESTARTS: {
    if (s->period < 1) return refuse(ok, "period must be >= 1", (double)s->period);
    if (s->period_mult < 1) return refuse(ok, "period_mult must be >= 1", (double)s->period_mult);
    if (!fin_nonneg(s->lr_min)) return refuse(ok, "lr_min must be finite and >= 0", s->lr_min);
    /* The position in the current period, in exact integers. period_mult
     * 1: a remainder (walking the periods took step / period rounds, 2^62
     * never ended). Otherwise each period is at least twice the last, so
     * at most 63 fit in an int64 step; one that would overflow is longer
     * than any step left (cur <= INT64_MAX - len < len * period_mult). */
    int64_t cur = step, len = s->period;
    double dlen = (double)len;
    if (s->period_mult == 1) {
      cur = step % len;
    } else {
      while (cur >= len) {
        cur -= len;
        if (len > INT64_MAX / s->period_mult) {
          dlen = (double)len * (double)s->period_mult;
          break;
        }
        len *= s->period_mult;
        dlen = (double)len;
      }
    }
    return cos_anneal(s->lr, s->lr_min, (double)cur / dlen);
  }
  case AG_SCHED_ONE_CYCLE: {
    if (s->total < 2) return refuse(ok, "total must be >= 2", (double)s->total);
    if (!(s->pct_start > 0 && s->pct_start < 1)) return refuse(ok, "pct_start must be in (0, 1)", s->pct_start);
    if (!(s->div_factor > 0) || isinf(s->div_factor)) return refuse(ok, "div_factor must be > 0", s->div_factor);
    if (!(s->final_div_factor > 0) || isinf(s->final_div_factor))
      return refuse(ok, "final_div_factor must be > 0", s->final_div_factor);
    double initial = s->lr / s->div_factor, min_lr = initial / s->final_div_factor;
    double end1 = s->pct_start * (double)s->total - 1, end2 = (double)s->total - 1;
    double t = step < s->total ? (double)step : end2;
    if (t <= end1) return cos_anneal(initial, s->lr, end1 > 0 ? t / end1 : 1.0);
    return cos_anneal(s->lr, min_lr, (t - end1) / (end2 - end1));
  }
  }
  *ok = false;
  ag_error_set(AG_ERR_INVALID, "ag_schedule_lr: unknown schedule kind %d", (int)s->kind);
  return NAN;
}

double ag_schedule_lr(const ag_schedule *s, int64_t step) {
  if (!s) {
    ag_error_set(AG_ERR_INVALID, "ag_schedule_lr: NULL schedule");
    return NAN;
  }
  if (step < 0) return bad("step must be >= 0", (double)step);
  if (!fin_nonneg(s->lr)) return bad("lr must be finite and >= 0", s->lr);
  if (s->warmup < 0) return bad("warmup must be >= 0", (double)s->warmup);
  if (s->warmup > 0) {
    if (!(s->warmup_start_factor >= 0 && s->warmup_start_factor <= 1))
      return bad("warmup start_factor must be in [0, 1]", s->warmup_start_factor);
    if (step < s->warmup) {
      bool ok = true;
      double lr0 = main_lr(s, 0, &ok), f = s->warmup_start_factor;
      if (!ok) return NAN;
      if (!isfinite(lr0)) return bad("the learning rate is not finite (the arguments overflow it)", lr0);
      return lr0 * (f + (1 - f) * (double)step / (double)s->warmup);
    }
    step -= s->warmup;
  }
  bool ok = true;
  double lr = main_lr(s, step, &ok);
  if (ok && !isfinite(lr))
    return bad("the learning rate is not finite (the arguments overflow it)", lr);
  return lr;
}

double ag_lr_cosine(int64_t step, int64_t warmup, int64_t total, double lr_max, double lr_min) {
  const char *what = step < 0 ? "step must be >= 0" : warmup < 0 ? "warmup must be >= 0"
                     : total < 0 ? "total must be >= 0" : NULL;
  if (what) {
    ag_error_set(AG_ERR_INVALID, "ag_lr_cosine: %s (got step %lld, warmup %lld, total %lld)", what,
                 (long long)step, (long long)warmup, (long long)total);
    return NAN;
  }
  if (!fin_nonneg(lr_max) || !fin_nonneg(lr_min)) {
    ag_error_set(AG_ERR_INVALID, "ag_lr_cosine: %s must be finite and >= 0 (got %g)",
                 !fin_nonneg(lr_max) ? "lr_max" : "lr_min", !fin_nonneg(lr_max) ? lr_max : lr_min);
    return NAN;
  }
  if (warmup > 0 && step < warmup) return lr_max * (double)(step + 1) / (double)warmup;
  if (total <= warmup) return lr_min;
  double p = (double)(step - warmup) / (double)(total - warmup);
  if (p > 1) p = 1;
  return lr_min + 0.5 * (lr_max - lr_min) * (1.0 + cos(M_PI * p));
}
