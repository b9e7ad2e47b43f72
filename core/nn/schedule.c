/* Learning-rate schedules as values: closed forms of
 * torch.optim.lr_scheduler's StepLR, MultiStepLR, LinearLR,
 * CosineAnnealingLR, CosineAnnealingWarmRestarts and OneCycleLR, with an
 * optional linear warmup in front (SequentialLR). */
#include <math.h>
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

static double main_lr(const ag_schedule *s, int64_t step) {
  switch (s->kind) {
  case AG_SCHED_CONSTANT:
    return s->lr;
  case AG_SCHED_STEP:
    if (s->step_size < 1) return bad("step_size must be >= 1", (double)s->step_size);
    if (!fin_nonneg(s->gamma)) return bad("gamma must be finite and >= 0", s->gamma);
    return s->lr * pow(s->gamma, (double)(step / s->step_size));
  case AG_SCHED_MULTISTEP: {
    if (s->n_milestones < 0 || s->n_milestones > AG_SCHEDULE_MAX_MILESTONES)
      return bad("n_milestones must be 0..16 with a milestone array", (double)s->n_milestones);
    if (!fin_nonneg(s->gamma)) return bad("gamma must be finite and >= 0", s->gamma);
    int k = 0;
    for (int i = 0; i < s->n_milestones; i++) {
      if (i && s->milestones[i] <= s->milestones[i - 1])
        return bad("milestones must be increasing", (double)s->milestones[i]);
      if (s->milestones[i] <= step) k = i + 1;
    }
    return s->lr * pow(s->gamma, k);
  }
  case AG_SCHED_LINEAR: {
    if (s->total < 1) return bad("total must be >= 1", (double)s->total);
    if (!fin_nonneg(s->start_factor) || !fin_nonneg(s->end_factor))
      return bad("start_factor and end_factor must be finite and >= 0", s->start_factor);
    int64_t t = step < s->total ? step : s->total;
    return s->lr * (s->start_factor + (s->end_factor - s->start_factor) * (double)t / (double)s->total);
  }
  case AG_SCHED_COSINE:
    if (s->total < 1) return bad("total must be >= 1", (double)s->total);
    if (!fin_nonneg(s->lr_min)) return bad("lr_min must be finite and >= 0", s->lr_min);
    if (step >= s->total) return s->lr_min;
    return cos_anneal(s->lr, s->lr_min, (double)step / (double)s->total);
  case AG_SCHED_COSINE_RESTARTS: {
    if (s->period < 1) return bad("period must be >= 1", (double)s->period);
    if (s->period_mult < 1) return bad("period_mult must be >= 1", (double)s->period_mult);
    if (!fin_nonneg(s->lr_min)) return bad("lr_min must be finite and >= 0", s->lr_min);
    int64_t cur = step, len = s->period; /* walk the periods: exact integers */
    while (cur >= len) {
      cur -= len;
      if (len > INT64_MAX / s->period_mult) break;
      len *= s->period_mult;
    }
    return cos_anneal(s->lr, s->lr_min, (double)cur / (double)len);
  }
  case AG_SCHED_ONE_CYCLE: {
    if (s->total < 2) return bad("total must be >= 2", (double)s->total);
    if (!(s->pct_start > 0 && s->pct_start < 1)) return bad("pct_start must be in (0, 1)", s->pct_start);
    if (!(s->div_factor > 0) || isinf(s->div_factor)) return bad("div_factor must be > 0", s->div_factor);
    if (!(s->final_div_factor > 0) || isinf(s->final_div_factor))
      return bad("final_div_factor must be > 0", s->final_div_factor);
    double initial = s->lr / s->div_factor, min_lr = initial / s->final_div_factor;
    double end1 = s->pct_start * (double)s->total - 1, end2 = (double)s->total - 1;
    double t = step < s->total ? (double)step : end2;
    if (t <= end1) return cos_anneal(initial, s->lr, end1 > 0 ? t / end1 : 1.0);
    return cos_anneal(s->lr, min_lr, (t - end1) / (end2 - end1));
  }
  }
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
      double lr0 = main_lr(s, 0), f = s->warmup_start_factor;
      return lr0 * (f + (1 - f) * (double)step / (double)s->warmup);
    }
    step -= s->warmup;
  }
  return main_lr(s, step);
}
