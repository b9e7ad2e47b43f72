/* `anygrad train`: the character-level language model of examples/charlm.c
 * on the best available device (or --device), with progress, held-out loss,
 * samples and a resumable checkpoint. */
#include <stdio.h>
#include <string.h>

#include "../examples/charlm.h"
#include "cli.h"

static void usage(void) {
  char bl[128];
  printf(
      "usage: anygrad train [options]\n"
      "Train a character-level language model on /usr/share/dict/words.\n\n"
      "  --model mlp|gpt      model (default mlp: context MLP; gpt: 2-layer transformer)\n"
      "  --device D           BACKEND[:N], backends: %s (default: best available)\n"
      "  --steps N            total optimizer steps (default 3000 mlp, 1500 gpt); with --resume\n"
      "                       the run continues to N, and N <= the saved step trains nothing\n"
      "  --batch N|auto       examples (mlp) or words (gpt) per micro-batch (1..%d); auto: the\n"
      "                       largest that fits under the memory cap (AG_ALLOC_CONF memory_cap_mb,\n"
      "                       needed on cpu) or the device's free memory, less 10%%\n"
      "  --accum N            micro-batches per step (gradient accumulation, 1..%d)\n"
      "  --lr X               peak learning rate (cosine schedule with warmup; 0 < X <= %g)\n"
      "  --warmup N           warmup steps (default 100)\n"
      "  --weight-decay X     AdamW weight decay (default 0.01)\n"
      "  --clip X             clip the global gradient norm to X (0: off; default 1)\n"
      "  --precision P        f32 (default), f16 (autocast + loss scaling) or bf16 (autocast)\n"
      "  --seed N             seed of data order, init and batches (default 1337; with --resume\n"
      "                       the checkpoint's seed unless given)\n"
      "  --context N --emb N --hidden N      mlp sizes (default 6, 24, 256)\n"
      "  --layers N --heads N --embd N       gpt sizes (default 2, 4, 64)\n"
      "  --checkpoint-activations             gpt: keep only each block's input for backward and\n"
      "                       re-run the block there (less activation memory, more compute)\n"
      "  --words PATH         word list (default /usr/share/dict/words)\n"
      "  --out PATH           checkpoint to write at the end (default charlm.safetensors);\n"
      "                       checked writable before the first step\n"
      "  --resume PATH        continue from a checkpoint (its architecture and seed are used)\n"
      "  --samples N          words to sample at the end (default 8)\n"
      "  --log-every N        steps between progress updates (default 50)\n"
      "  --trace PATH         write a Chrome trace of the run (chrome://tracing, Perfetto)\n"
      "  --profile on|off     step profiler verdict and leak check at the end (default on)\n"
      "  --estimate-memory    print the predicted peak device memory of a step by category for\n"
      "                       the configured batch (from two steps at small batches) and exit\n"
      "  --report PATH        write a self-contained HTML run report (loss and held-out curves,\n"
      "                       step time, memory by category, allocator segments, sync sites);\n"
      "                       the held-out loss is then evaluated at each progress update\n"
      AG_CLI_THREADS_HELP "\n"
      "A loss or parameter that becomes NaN/Inf stops the run; the checkpoint at --out is\n"
      "then left as it was.\n" AG_CLI_EXIT_HELP,
      ag_cli_backend_list(bl, sizeof bl), CHARLM_MAX_BATCH, CHARLM_MAX_ACCUM, CHARLM_MAX_LR);
}

enum {
  O_MODEL = 256, O_DEVICE, O_STEPS, O_BATCH, O_ACCUM, O_LR, O_WARMUP, O_WD, O_CLIP, O_PRECISION, O_SEED,
  O_CONTEXT, O_EMB, O_HIDDEN, O_LAYERS, O_HEADS, O_EMBD, O_WORDS, O_OUT, O_RESUME, O_SAMPLES, O_LOG_EVERY,
  O_TRACE, O_PROFILE, O_REPORT, O_CKPT_ACT, O_ESTIMATE, O_HELP
};

static const struct option k_opts[] = {
    {"model", required_argument, NULL, O_MODEL},       {"device", required_argument, NULL, O_DEVICE},
    {"steps", required_argument, NULL, O_STEPS},       {"batch", required_argument, NULL, O_BATCH},
    {"accum", required_argument, NULL, O_ACCUM},       {"lr", required_argument, NULL, O_LR},
    {"warmup", required_argument, NULL, O_WARMUP},     {"weight-decay", required_argument, NULL, O_WD},
    {"clip", required_argument, NULL, O_CLIP},         {"precision", required_argument, NULL, O_PRECISION},
    {"seed", required_argument, NULL, O_SEED},         {"context", required_argument, NULL, O_CONTEXT},
    {"emb", required_argument, NULL, O_EMB},           {"hidden", required_argument, NULL, O_HIDDEN},
    {"layers", required_argument, NULL, O_LAYERS},     {"heads", required_argument, NULL, O_HEADS},
    {"embd", required_argument, NULL, O_EMBD},         {"words", required_argument, NULL, O_WORDS},
    {"out", required_argument, NULL, O_OUT},           {"resume", required_argument, NULL, O_RESUME},
    {"samples", required_argument, NULL, O_SAMPLES},   {"log-every", required_argument, NULL, O_LOG_EVERY},
    {"trace", required_argument, NULL, O_TRACE},       {"profile", required_argument, NULL, O_PROFILE},
    {"report", required_argument, NULL, O_REPORT},     {"checkpoint-activations", no_argument, NULL, O_CKPT_ACT},
    {"estimate-memory", no_argument, NULL, O_ESTIMATE},     {"help", no_argument, NULL, O_HELP},
    AG_CLI_THREADS_OPT,                                {NULL, 0, NULL, 0}};

/* Parse into o. Returns -1 to go on, else the exit code (0 after --help). */
static int parse(int argc, char **argv, charlm_options *o) {
  const char *C = "train";
  /* The model picks the defaults the other options then override. */
  charlm_model_kind kind = CHARLM_MLP;
  for (int c = ag_cli_next(C, argc, argv, k_opts, true); c != -1; c = ag_cli_next(C, argc, argv, k_opts, false)) {
    if (c == '?') return AG_EXIT_USAGE;
    if (c == O_HELP) {
      usage();
      return AG_EXIT_OK;
    }
    if (c == O_MODEL) {
      const char *v = ag_cli_arg();
      if (strcmp(v, "mlp") && strcmp(v, "gpt")) {
        fprintf(stderr, "anygrad train: --model must be mlp or gpt, got '%s'\n", v);
        return AG_EXIT_USAGE;
      }
      kind = !strcmp(v, "gpt") ? CHARLM_GPT : CHARLM_MLP;
    }
  }
  *o = charlm_defaults(kind);
  o->out = "charlm.safetensors";
  o->profile = true;
  const char *device = NULL;
  bool ok = true;
  for (int c = ag_cli_next(C, argc, argv, k_opts, true); ok && c != -1; c = ag_cli_next(C, argc, argv, k_opts, false)) {
    const char *v = ag_cli_arg();
    switch (c) {
      case O_MODEL: break;
      case O_DEVICE: device = v; break;
      case O_STEPS: ok = ag_cli_i64(C, "steps", v, 0, CHARLM_MAX_STEPS, &o->steps); break;
      case O_BATCH:
        if (!strcmp(v, "auto"))
          o->batch_auto = true;
        else
          ok = ag_cli_i64(C, "batch", v, 1, CHARLM_MAX_BATCH, &o->batch);
        break;
      case O_ACCUM: ok = ag_cli_int(C, "accum", v, 1, CHARLM_MAX_ACCUM, &o->accum); break;
      case O_LR:
        ok = ag_cli_f64(C, "lr", v, 0, CHARLM_MAX_LR, &o->lr);
        if (ok && !(o->lr > 0)) {
          fprintf(stderr, "anygrad train: --lr must be > 0, got '%s'\n", v);
          ok = false;
        }
        break;
      case O_WARMUP: ok = ag_cli_i64(C, "warmup", v, 0, CHARLM_MAX_STEPS, &o->warmup); break;
      case O_WD: ok = ag_cli_f64(C, "weight-decay", v, 0, 1, &o->weight_decay); break;
      case O_CLIP: ok = ag_cli_f64(C, "clip", v, 0, 1e6, &o->clip); break;
      case O_PRECISION:
        if (ag_dtype_parse(v, &o->precision) != AG_OK ||
            (o->precision != AG_F32 && o->precision != AG_F16 && o->precision != AG_BF16)) {
          fprintf(stderr, "anygrad train: --precision must be f32, f16 or bf16, got '%s'\n", v);
          ok = false;
        }
        break;
      case O_SEED:
        ok = ag_cli_u64(C, "seed", v, &o->seed);
        o->seed_set = true;
        break;
      case O_CONTEXT: ok = ag_cli_int(C, "context", v, 1, CHARLM_MAX_CONTEXT, &o->context); break;
      case O_EMB: ok = ag_cli_int(C, "emb", v, 1, CHARLM_MAX_WIDTH, &o->emb); break;
      case O_HIDDEN: ok = ag_cli_int(C, "hidden", v, 1, CHARLM_MAX_WIDTH, &o->hidden); break;
      case O_LAYERS: ok = ag_cli_int(C, "layers", v, 1, CHARLM_MAX_LAYERS, &o->n_layer); break;
      case O_HEADS: ok = ag_cli_int(C, "heads", v, 1, CHARLM_MAX_LAYERS, &o->n_head); break;
      case O_EMBD: ok = ag_cli_int(C, "embd", v, 1, CHARLM_MAX_WIDTH, &o->n_embd); break;
      case O_WORDS: o->words_path = v; break;
      case O_OUT: o->out = v; break;
      case O_RESUME: o->resume = v; break;
      case O_SAMPLES: ok = ag_cli_int(C, "samples", v, 0, 10000, &o->samples); break;
      case O_LOG_EVERY: ok = ag_cli_int(C, "log-every", v, 1, 1 << 30, &o->log_every); break;
      case O_TRACE: o->trace = v; break;
      case O_PROFILE: ok = ag_cli_bool(C, "profile", v, &o->profile); break;
      case O_CKPT_ACT: o->checkpoint_activations = true; break;
      case O_ESTIMATE: o->estimate_memory = true; break;
      case O_REPORT:
        o->report = v;
        if (!*v) {
          fprintf(stderr, "anygrad train: --report must not be empty\n");
          ok = false;
        }
        break;
      case AG_CLI_THREADS: ok = ag_cli_threads(C, v); break;
      default: ok = false; break; /* '?': reported by the first pass */
    }
  }
  if (!ok) return AG_EXIT_USAGE;
  if (!*o->out) {
    fprintf(stderr, "anygrad train: --out must not be empty\n");
    return AG_EXIT_USAGE;
  }
  if (device) {
    int rc = ag_cli_device(C, device, &o->device);
    if (rc != AG_EXIT_OK) return rc;
  }
  return -1;
}

int ag_cmd_train(int argc, char **argv) {
  charlm_options o;
  int rc = parse(argc, argv, &o);
  if (rc >= 0) return rc;
  charlm_result r;
  ag_status st = charlm_train(&o, &r);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad train: %s: %s\n", ag_status_name(st), ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  return AG_EXIT_OK;
}
