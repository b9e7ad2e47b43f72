/* `anygrad train`: the character-level language model of models/charlm.c
 * on the best available device (or --device), with progress, held-out loss,
 * samples and a resumable checkpoint. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "charlm.h"
#include "cnn.h"
#include "cli.h"
#include "text.h"

static void usage(void) {
  char bl[128];
  printf(
      "usage: anygrad train [options]\n"
      "Train a character-level language model on /usr/share/dict/words (--task words, the\n"
      "default), a CNN on Fashion-MNIST images (--task fashion-mnist), or a Llama-style model on\n"
      "text (--task text).\n\n"
      "  --task words|fashion-mnist|text\n"
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
      "  --checkpoint-activations             gpt: keep only the inputs of each block's attention and\n"
      "                       MLP for backward and re-run them there (less activation memory,\n"
      "                       more compute)\n"
      "  --words PATH         word list (default /usr/share/dict/words)\n"
      "  --out PATH           checkpoint to write at the end (default charlm.safetensors);\n"
      "                       checked writable before the first step\n"
      "  --save-every N       also write --out every N steps (default 0: at the end only); each\n"
      "                       write is atomic (temporary file, fsync, rename)\n"
      "  --heartbeat PATH     rewrite PATH after every step with one line: pid, rank, step, time\n"
      "                       (with --dist mpi each rank writes PATH.RANK); anygrad launch watches it\n"
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
      AG_CLI_THREADS_HELP AG_CLI_NUMERICS_HELP "\n"
      "Data parallelism (docs/distributed.md): one replica per device, the --batch shared among\n"
      "them, gradients averaged so training equals one device on the whole batch:\n"
      "  --devices D1,D2,...  in-process: one thread per device (e.g. cpu,opencl:0)\n"
      "  --dist mpi           one replica per process: mpirun -np N anygrad train --dist mpi;\n"
      "                       only rank 0 prints and writes --out. Each rank runs on --device:\n"
      "                       a backend without index (--device cuda, or the best one when\n"
      "                       --device is not given) means the local rank's device, cuda:L for\n"
      "                       local rank L modulo the device count (from the launcher:\n"
      "                       OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID,\n"
      "                       LOCAL_RANK, ...); --device cuda:1 is that device on every rank\n"
      "  --bucket-mb X        gradient bucket size in MiB (default 25)\n"
      "  --balance on|off     share the batch by measured throughput (default on)\n"
      "  --zero 0|1|2         shard the optimizer state across the replicas (ZeRO stage 1;\n"
      "                       2: gradients too); --out then also writes OUT.rank<r>.safetensors\n"
      "                       per replica, and --resume takes them with any replica count\n\n"
      "--task fashion-mnist takes --device, --batch (default 128), --lr (3e-3), --weight-decay\n"
      "(1e-4), --warmup, --seed, --out (default cnn.safetensors, written after every epoch),\n"
      "--resume, --profile, --dist mpi and --bucket-mb (equal shares; batch norm over each\n"
      "replica's rows), and:\n"
      "  --epochs N           total epochs (default 5; with --resume the run continues to N)\n"
      "  --channels A,B       channels of the two conv blocks (default 16,32)\n"
      "  --data DIR           the idx files (default " CNN_DATA_DIR ")\n"
      "  --workers N          loader threads that decode, augment and normalise (default 2);\n"
      "                       0 does it on the training thread (the profiler then says input-bound\n"
      "                       when that is what limits the step)\n"
      "  --augment on|off     random crop (padding 4) and horizontal flip (default off)\n"
      "  --train-limit N --test-limit N   use the first N images (quick runs, tests)\n\n"
      "--task text trains a Llama-style model (docs/llama.md) on Debian's fortunes files, or --data\n"
      "FILE, with a byte-level BPE learned on the first 95%% (the last 5%% held out). It takes\n"
      "--device, --steps (default 1000), --batch (8), --lr (3e-3), --warmup (30), --weight-decay\n"
      "(0.1), --clip (1), --seed, --log-every (100), --layers (4), --heads (4), --embd (model\n"
      "width, 128), --samples (tokens sampled at the end, 200; 0: none), --out (checkpoint: weights\n"
      "under Hugging Face names and the AdamW state, default text.safetensors; the tokenizer at\n"
      "PATH.bpe), --resume (its architecture, vocabulary and seed are used; the same --data, and\n"
      "for an exact continuation the same --steps, --batch, --lr, --warmup, --weight-decay,\n"
      "--clip), and:\n"
      "  --data FILE          the text to train on (default: the files of " TEXT_FORTUNES_DIR ")\n"
      "  --kv-heads N         key/value heads (default 2)\n"
      "  --seq N              tokens per sequence (default 128)\n"
      "  --vocab N            BPE vocabulary size (default 512; 256: raw bytes)\n"
      "  --eval-batches N     held-out batches per evaluation (default 8)\n"
      "  --save-every N       also write --out every N steps (default 0: at the end only)\n"
      "  --hf DIR             also write the model and tokenizer at the end as a Hugging Face folder\n"
      "                       (config.json, model.safetensors, tokenizer.json, ...: docs/export.md)\n"
      "  --prompt S --temperature X --top-k N   the sample (default \"\\n\", 0.8, 40)\n\n"
      "A loss or parameter that becomes NaN/Inf stops the run; the checkpoint at --out is\n"
      "then left as it was.\n" AG_CLI_EXIT_HELP,
      ag_cli_backend_list(bl, sizeof bl), CHARLM_MAX_BATCH, CHARLM_MAX_ACCUM, CHARLM_MAX_LR);
}

enum {
  O_MODEL = 256, O_DEVICE, O_STEPS, O_BATCH, O_ACCUM, O_LR, O_WARMUP, O_WD, O_CLIP, O_PRECISION, O_SEED,
  O_CONTEXT, O_EMB, O_HIDDEN, O_LAYERS, O_HEADS, O_EMBD, O_WORDS, O_OUT, O_RESUME, O_SAMPLES, O_LOG_EVERY,
  O_TRACE, O_PROFILE, O_REPORT, O_CKPT_ACT, O_ESTIMATE, O_HELP, O_TASK, O_EPOCHS, O_CHANNELS, O_DATA, O_TRAIN_LIMIT,
  O_TEST_LIMIT, O_WORKERS, O_AUGMENT, O_DEVICES, O_DIST, O_BUCKET_MB, O_BALANCE, O_KV_HEADS, O_SEQ, O_VOCAB,
  O_EVAL_BATCHES, O_PROMPT, O_TEMPERATURE, O_TOP_K, O_SAVE_EVERY, O_HF, O_HEARTBEAT,
  O_ZERO
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
    AG_CLI_THREADS_OPT, AG_CLI_NUMERICS_OPT,
    {"task", required_argument, NULL, O_TASK},
    {"epochs", required_argument, NULL, O_EPOCHS},     {"channels", required_argument, NULL, O_CHANNELS},
    {"data", required_argument, NULL, O_DATA},         {"train-limit", required_argument, NULL, O_TRAIN_LIMIT},
    {"test-limit", required_argument, NULL, O_TEST_LIMIT}, {"workers", required_argument, NULL, O_WORKERS},
    {"augment", required_argument, NULL, O_AUGMENT},   {"devices", required_argument, NULL, O_DEVICES},
    {"dist", required_argument, NULL, O_DIST},         {"bucket-mb", required_argument, NULL, O_BUCKET_MB},
    {"zero", required_argument, NULL, O_ZERO},
    {"balance", required_argument, NULL, O_BALANCE},   {"kv-heads", required_argument, NULL, O_KV_HEADS},
    {"seq", required_argument, NULL, O_SEQ},           {"vocab", required_argument, NULL, O_VOCAB},
    {"eval-batches", required_argument, NULL, O_EVAL_BATCHES}, {"prompt", required_argument, NULL, O_PROMPT},
    {"temperature", required_argument, NULL, O_TEMPERATURE}, {"top-k", required_argument, NULL, O_TOP_K},
    {"save-every", required_argument, NULL, O_SAVE_EVERY},     {"hf", required_argument, NULL, O_HF},
    {"heartbeat", required_argument, NULL, O_HEARTBEAT},
    {NULL, 0, NULL, 0}};

#define MAX_REPLICAS 64

/* Data-parallel settings of the words task. */
typedef struct dp_opts {
  int n_devices; /* --devices: in-process replicas */
  ag_device devices[MAX_REPLICAS];
  bool mpi;      /* --dist mpi */
  bool device_indexed; /* --device BACKEND:N (else each MPI rank takes its local rank's) */
} dp_opts;

static int parse_devices(const char *v, dp_opts *dp) {
  char buf[1024], *items[MAX_REPLICAS];
  int n = ag_cli_list("train", "devices", v, buf, sizeof buf, items, MAX_REPLICAS);
  if (n < 0) return AG_EXIT_USAGE;
  dp->n_devices = 0;
  for (int i = 0; i < n; i++) {
    int rc = ag_cli_device("train", items[i], &dp->devices[dp->n_devices]);
    if (rc != AG_EXIT_OK) return rc;
    dp->n_devices++;
  }
  return AG_EXIT_OK;
}

/* --lr: a number in (0, hi]; every task takes it the same way. */
static bool parse_lr(const char *v, double hi, double *out) {
  if (!ag_cli_f64("train", "lr", v, 0, hi, out)) return false;
  if (*out > 0) return true;
  fprintf(stderr, "anygrad train: --lr must be > 0, got '%s'\n", v);
  return false;
}

/* Outputs checked against the inputs and each other before anything runs
 * (ag_cli_outputs_distinct). --resume may be --out itself: the checkpoint is
 * read at the start and replaced atomically when saved, so training can
 * continue in place; it may not be any other output. */
static bool outputs_distinct(const ag_cli_file *inputs, int n_inputs, const char *resume, const ag_cli_file *outs,
                             int n_outs) {
  ag_cli_file r = {"--resume", resume};
  return ag_cli_outputs_distinct("train", inputs, n_inputs, outs, n_outs) &&
         ag_cli_outputs_distinct("train", &r, 1, outs + 1, n_outs - 1);
}

/* --bucket-mb X (MiB, > 0) as bytes (at least 1), for both tasks' parsers. */
static bool parse_bucket_mb(const char *C, const char *v, int64_t *bytes) {
  double mb = 0;
  bool ok = ag_cli_f64(C, "bucket-mb", v, 0, 1 << 20, &mb);
  if (ok && !(mb > 0)) {
    fprintf(stderr, "anygrad train: --bucket-mb must be > 0, got '%s'\n", v);
    ok = false;
  }
  *bytes = (int64_t)(mb * 1048576.0);
  if (*bytes < 1) *bytes = 1;
  return ok;
}

/* --task fashion-mnist: the options that apply to it; the words-only ones
 * are a usage error rather than silently ignored. */
static int parse_cnn(int argc, char **argv, cnn_options *o, dp_opts *dp) {
  const char *C = "train";
  *o = cnn_defaults();
  o->out = "cnn.safetensors";
  const char *device = NULL;
  bool ok = true;
  for (int c = ag_cli_next(C, argc, argv, k_opts, true); ok && c != -1; c = ag_cli_next(C, argc, argv, k_opts, false)) {
    const char *v = ag_cli_arg();
    switch (c) {
      case O_TASK: break;
      case O_DEVICE: device = v; break;
      case O_EPOCHS: ok = ag_cli_int(C, "epochs", v, 0, CNN_MAX_EPOCHS, &o->epochs); break;
      case O_BATCH: ok = ag_cli_i64(C, "batch", v, 1, CNN_MAX_BATCH, &o->batch); break;
      case O_LR: ok = parse_lr(v, 10, &o->lr); break;
      case O_WD: ok = ag_cli_f64(C, "weight-decay", v, 0, 1, &o->weight_decay); break;
      case O_WARMUP: ok = ag_cli_i64(C, "warmup", v, 0, INT64_C(1) << 40, &o->warmup); break;
      case O_SEED:
        ok = ag_cli_u64(C, "seed", v, &o->seed);
        o->seed_set = true;
        break;
      case O_CHANNELS: {
        int ab[2];
        ok = ag_cli_int_list(C, "channels", v, 2, 1, CNN_MAX_WIDTH, ab);
        if (ok) {
          o->c1 = ab[0];
          o->c2 = ab[1];
        }
        break;
      }
      case O_DATA: o->data_dir = v; break;
      case O_WORKERS: ok = ag_cli_int(C, "workers", v, 0, 64, &o->workers); break;
      case O_AUGMENT: ok = ag_cli_bool(C, "augment", v, &o->augment); break;
      case O_TRAIN_LIMIT: ok = ag_cli_i64(C, "train-limit", v, 0, INT64_C(1) << 40, &o->train_limit); break;
      case O_TEST_LIMIT: ok = ag_cli_i64(C, "test-limit", v, 0, INT64_C(1) << 40, &o->test_limit); break;
      case O_OUT: o->out = v; break;
      case O_RESUME: o->resume = v; break;
      case O_PROFILE: ok = ag_cli_bool(C, "profile", v, &o->profile); break;
      case AG_CLI_THREADS: ok = ag_cli_threads(C, v); break;
      case AG_CLI_NUMERICS: ok = ag_cli_numerics(C, v); break;
      case O_DIST:
        if (strcmp(v, "mpi")) {
          fprintf(stderr, "anygrad train: --dist must be mpi, got '%s'\n", v);
          ok = false;
        }
        dp->mpi = true;
        break;
      case O_BUCKET_MB: ok = parse_bucket_mb(C, v, &o->bucket_bytes); break;
      case '?': ok = false; break;
      case O_SAVE_EVERY: case O_HF:
        fprintf(stderr, "anygrad train: --save-every and --hf apply to --task text and words, not fashion-mnist\n");
        ok = false;
        break;
      default: {
        const char *name = "?";
        for (const struct option *k = k_opts; k->name; k++)
          if (k->val == c) name = k->name;
        fprintf(stderr, "anygrad train: --%s applies to --task words, not fashion-mnist\n", name);
        ok = false;
        break;
      }
    }
  }
  if (!ok) return AG_EXIT_USAGE;
  if (!*o->out) {
    fprintf(stderr, "anygrad train: --out must not be empty\n");
    return AG_EXIT_USAGE;
  }
  static const char *const idx_names[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                                           "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  char idx[4][4096];
  ag_cli_file ins[4], outs[1] = {{"--out", o->out}};
  for (int i = 0; i < 4; i++) {
    int n = snprintf(idx[i], sizeof idx[i], "%s/%s", o->data_dir, idx_names[i]);
    ins[i] = (ag_cli_file){"--data", n > 0 && (size_t)n < sizeof idx[i] ? idx[i] : NULL};
  }
  if (!outputs_distinct(ins, 4, o->resume, outs, 1)) return AG_EXIT_USAGE;
  if (device) {
    int rc = ag_cli_device(C, device, &o->device);
    if (rc != AG_EXIT_OK) return rc;
    dp->device_indexed = strchr(device, ':') != NULL;
  }
  return -1;
}

/* --task text: its options; the others are a usage error. */
static int parse_text(int argc, char **argv, text_options *o) {
  const char *C = "train";
  *o = text_defaults();
  o->out = "text.safetensors";
  const char *device = NULL;
  bool ok = true;
  for (int c = ag_cli_next(C, argc, argv, k_opts, true); ok && c != -1; c = ag_cli_next(C, argc, argv, k_opts, false)) {
    const char *v = ag_cli_arg();
    switch (c) {
      case O_TASK: break;
      case O_DEVICE: device = v; break;
      case O_STEPS: ok = ag_cli_i64(C, "steps", v, 0, TEXT_MAX_STEPS, &o->steps); break;
      case O_BATCH: ok = ag_cli_i64(C, "batch", v, 1, TEXT_MAX_BATCH, &o->batch); break;
      case O_LR: ok = parse_lr(v, 10, &o->lr); break;
      case O_WARMUP: ok = ag_cli_i64(C, "warmup", v, 0, TEXT_MAX_STEPS, &o->warmup); break;
      case O_WD: ok = ag_cli_f64(C, "weight-decay", v, 0, 1, &o->weight_decay); break;
      case O_CLIP: ok = ag_cli_f64(C, "clip", v, 0, 1e6, &o->clip); break;
      case O_SEED:
        ok = ag_cli_u64(C, "seed", v, &o->seed);
        o->seed_set = true;
        break;
      case O_LOG_EVERY: ok = ag_cli_int(C, "log-every", v, 1, 1 << 30, &o->log_every); break;
      case O_RESUME: o->resume = v; break;
      case O_SAVE_EVERY: ok = ag_cli_i64(C, "save-every", v, 0, TEXT_MAX_STEPS, &o->save_every); break;
      case O_HF: o->hf = v; break;
      case O_LAYERS: ok = ag_cli_int(C, "layers", v, 1, TEXT_MAX_LAYERS, &o->layers); break;
      case O_HEADS: ok = ag_cli_int(C, "heads", v, 1, TEXT_MAX_WIDTH, &o->heads); break;
      case O_KV_HEADS: ok = ag_cli_int(C, "kv-heads", v, 1, TEXT_MAX_WIDTH, &o->kv_heads); break;
      case O_EMBD: ok = ag_cli_int(C, "embd", v, 1, TEXT_MAX_WIDTH, &o->dim); break;
      case O_SEQ: ok = ag_cli_i64(C, "seq", v, 1, TEXT_MAX_SEQ, &o->seq); break;
      case O_VOCAB: ok = ag_cli_int(C, "vocab", v, 256, TEXT_MAX_VOCAB, &o->vocab); break;
      case O_EVAL_BATCHES: ok = ag_cli_int(C, "eval-batches", v, 0, 1 << 20, &o->eval_batches); break;
      case O_SAMPLES: ok = ag_cli_int(C, "samples", v, 0, 1 << 20, &o->sample_tokens); break;
      case O_PROMPT: o->prompt = v; break;
      case O_TEMPERATURE:
        ok = ag_cli_f64(C, "temperature", v, 0, 1e6, &o->temperature);
        if (ok && !(o->temperature > 0)) {
          fprintf(stderr, "anygrad train: --temperature must be > 0, got '%s'\n", v);
          ok = false;
        }
        break;
      case O_TOP_K: ok = ag_cli_int(C, "top-k", v, 0, TEXT_MAX_VOCAB, &o->top_k); break;
      case O_DATA: o->data = v; break;
      case O_OUT: o->out = v; break;
      case AG_CLI_THREADS: ok = ag_cli_threads(C, v); break;
      case AG_CLI_NUMERICS: ok = ag_cli_numerics(C, v); break;
      case '?': ok = false; break;
      default: {
        const char *name = "?";
        for (const struct option *k = k_opts; k->name; k++)
          if (k->val == c) name = k->name;
        fprintf(stderr, "anygrad train: --%s does not apply to --task text\n", name);
        ok = false;
        break;
      }
    }
  }
  if (!ok) return AG_EXIT_USAGE;
  if (!*o->out) {
    fprintf(stderr, "anygrad train: --out must not be empty\n");
    return AG_EXIT_USAGE;
  }
  if (text_check_outputs(o) != AG_OK) {
    fprintf(stderr, "anygrad train: %s\n", ag_last_error());
    return AG_EXIT_USAGE;
  }
  if (o->dim % o->heads || (o->dim / o->heads) % 2 || o->heads % (o->kv_heads ? o->kv_heads : o->heads)) {
    fprintf(stderr, "anygrad train: --embd %d must be a multiple of --heads %d with an even quotient, and --heads "
                    "a multiple of --kv-heads %d\n", o->dim, o->heads, o->kv_heads);
    return AG_EXIT_USAGE;
  }
  if (device) {
    int rc = ag_cli_device(C, device, &o->device);
    if (rc != AG_EXIT_OK) return rc;
  }
  return -1;
}

/* Parse into o. Returns -1 to go on, else the exit code (0 after --help). */
static int parse(int argc, char **argv, charlm_options *o, bool *task_cnn, bool *task_text, dp_opts *dp) {
  const char *C = "train";
  /* The model picks the defaults the other options then override. */
  charlm_model_kind kind = CHARLM_MLP;
  for (int c = ag_cli_next(C, argc, argv, k_opts, true); c != -1; c = ag_cli_next(C, argc, argv, k_opts, false)) {
    if (c == '?') return AG_EXIT_USAGE;
    if (c == O_HELP) {
      usage();
      return AG_EXIT_OK;
    }
    if (c == O_TASK) {
      const char *v = ag_cli_arg();
      if (strcmp(v, "words") && strcmp(v, "fashion-mnist") && strcmp(v, "text")) {
        fprintf(stderr, "anygrad train: --task must be words, fashion-mnist or text, got '%s'\n", v);
        return AG_EXIT_USAGE;
      }
      *task_cnn = !strcmp(v, "fashion-mnist");
      *task_text = !strcmp(v, "text");
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
  if (*task_cnn || *task_text) return -1;
  *o = charlm_defaults(kind);
  o->out = "charlm.safetensors";
  o->profile = true;
  o->balance = true;
  const char *device = NULL, *devices = NULL;
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
      case O_LR: ok = parse_lr(v, CHARLM_MAX_LR, &o->lr); break;
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
      case AG_CLI_NUMERICS: ok = ag_cli_numerics(C, v); break;
      case O_DEVICES: devices = v; break;
      case O_DIST:
        if (strcmp(v, "mpi")) {
          fprintf(stderr, "anygrad train: --dist must be mpi (in-process replicas: --devices), got '%s'\n", v);
          ok = false;
        }
        dp->mpi = true;
        break;
      case O_BUCKET_MB: ok = parse_bucket_mb(C, v, &o->bucket_bytes); break;
      case O_BALANCE: ok = ag_cli_bool(C, "balance", v, &o->balance); break;
      case O_SAVE_EVERY: ok = ag_cli_i64(C, "save-every", v, 0, CHARLM_MAX_STEPS, &o->save_every); break;
      case O_HEARTBEAT:
        o->heartbeat = v;
        if (!*v) {
          fprintf(stderr, "anygrad train: --heartbeat must not be empty\n");
          ok = false;
        }
        break;
      case O_ZERO: ok = ag_cli_int(C, "zero", v, 0, 2, &o->zero_stage); break;
      case O_TASK: break;
      case O_EPOCHS: case O_CHANNELS: case O_DATA: case O_TRAIN_LIMIT: case O_TEST_LIMIT: case O_WORKERS:
      case O_AUGMENT:
        fprintf(stderr, "anygrad train: --epochs, --channels, --data, --workers, --augment and --*-limit apply "
                        "to --task fashion-mnist (--data also to --task text)\n");
        ok = false;
        break;
      case O_KV_HEADS: case O_SEQ: case O_VOCAB: case O_EVAL_BATCHES: case O_PROMPT: case O_TEMPERATURE: case O_TOP_K:
      case O_HF:
        fprintf(stderr, "anygrad train: --kv-heads, --seq, --vocab, --eval-batches, --prompt, --temperature, "
                        "--top-k and --hf apply to --task text\n");
        ok = false;
        break;
      default: ok = false; break; /* '?': reported by the first pass */
    }
  }
  if (!ok) return AG_EXIT_USAGE;
  if (!*o->out) {
    fprintf(stderr, "anygrad train: --out must not be empty\n");
    return AG_EXIT_USAGE;
  }
  ag_cli_file words = {"--words", o->words_path},
              outs[4] = {{"--out", o->out}, {"--trace", o->trace}, {"--report", o->report},
                         {"--heartbeat", o->heartbeat}};
  if (!outputs_distinct(&words, 1, o->resume, outs, 4)) return AG_EXIT_USAGE;
  if (device) {
    int rc = ag_cli_device(C, device, &o->device);
    if (rc != AG_EXIT_OK) return rc;
    dp->device_indexed = strchr(device, ':') != NULL;
  }
  if (devices && (device || dp->mpi)) {
    fprintf(stderr, "anygrad train: --devices (in-process replicas) goes with neither --device nor --dist\n");
    return AG_EXIT_USAGE;
  }
  if (devices) {
    int rc = parse_devices(devices, dp);
    if (rc != AG_EXIT_OK) return rc;
  }
  if (devices && o->batch < dp->n_devices) {
    fprintf(stderr, "anygrad train: --batch %lld is smaller than the %d replicas of --devices: each replica needs "
                    "at least one example (--batch >= %d)\n", (long long)o->batch, dp->n_devices, dp->n_devices);
    return AG_EXIT_USAGE;
  }
  if (o->zero_stage && !devices && !dp->mpi) {
    fprintf(stderr, "anygrad train: --zero shards the optimizer across replicas: it needs --devices or --dist mpi\n");
    return AG_EXIT_USAGE;
  }
  if (o->zero_stage && o->precision == AG_F16) {
    fprintf(stderr, "anygrad train: --zero with --precision f16 is not supported (the loss scaler's inf check would "
                    "see one shard); use bf16 or f32\n");
    return AG_EXIT_USAGE;
  }
  if ((devices || dp->mpi) && (o->batch_auto || o->estimate_memory)) {
    fprintf(stderr, "anygrad train: --batch auto and --estimate-memory measure one device; not with --devices "
                    "or --dist\n");
    return AG_EXIT_USAGE;
  }
  return -1;
}

/* ---- data parallelism ---- */

typedef struct replica {
  charlm_options o;
  charlm_result r;
  ag_status st;
  char msg[1024];
} replica;

static void *replica_main(void *p) {
  replica *a = p;
  a->st = charlm_train(&a->o, &a->r);
  if (a->st != AG_OK) snprintf(a->msg, sizeof a->msg, "%s", ag_last_error());
  return NULL;
}

/* The error to report: the first rank's own failure rather than the
 * aborts it caused in the others. */
static int report_replicas(replica *rs, int n) {
  int pick = -1;
  for (int i = 0; i < n && pick < 0; i++)
    if (rs[i].st != AG_OK && rs[i].st != AG_ERR_ABORTED) pick = i;
  for (int i = 0; i < n && pick < 0; i++)
    if (rs[i].st != AG_OK) pick = i;
  if (pick < 0) return AG_EXIT_OK;
  char d[32];
  fprintf(stderr, "anygrad train: replica %d (%s): %s: %s\n", pick, ag_device_str(rs[pick].o.device, d, sizeof d),
          ag_status_name(rs[pick].st), rs[pick].msg);
  return AG_EXIT_RUNTIME;
}

static int train_inproc(const charlm_options *o, const dp_opts *dp) {
  int n = dp->n_devices;
  ag_group *g[MAX_REPLICAS];
  ag_status st = ag_group_create_inproc(n, dp->devices, NULL, g);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad train: %s: %s\n", ag_status_name(st), ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  replica *rs = calloc((size_t)n, sizeof *rs);
  pthread_t th[MAX_REPLICAS];
  bool started[MAX_REPLICAS] = {0};
  if (!rs) {
    for (int i = 0; i < n; i++) ag_group_destroy(g[i]);
    fprintf(stderr, "anygrad train: out of memory\n");
    return AG_EXIT_RUNTIME;
  }
  if (!o->quiet) {
    printf("anygrad train: %d replicas in this process:", n);
    for (int i = 0; i < n; i++) {
      char d[32];
      printf(" %s", ag_device_str(dp->devices[i], d, sizeof d));
    }
    printf(" (global batch %lld, %s shares)\n", (long long)o->batch, o->balance ? "balanced" : "equal");
  }
  for (int i = 0; i < n; i++) {
    rs[i].o = *o;
    rs[i].o.device = dp->devices[i];
    rs[i].o.group = g[i];
    if (i > 0) rs[i].o.heartbeat = NULL; /* one process: replica 0's heartbeat */
    if (pthread_create(&th[i], NULL, replica_main, &rs[i]) == 0) {
      started[i] = true;
    } else {
      rs[i].st = AG_ERR_BACKEND;
      snprintf(rs[i].msg, sizeof rs[i].msg, "cannot start its thread");
      ag_group_abort(g[i], "anygrad train: a replica thread could not start");
    }
  }
  for (int i = 0; i < n; i++)
    if (started[i]) pthread_join(th[i], NULL);
  if (!o->quiet && rs[0].st == AG_OK && o->balance) {
    printf("anygrad train: final shares of the batch:");
    for (int i = 0; i < n; i++) printf(" %lld", (long long)rs[i].r.ddp_rows);
    printf(" (%lld rebalances)\n", (long long)rs[0].r.ddp.rebalances);
  }
  int rc = report_replicas(rs, n);
  for (int i = 0; i < n; i++) ag_group_destroy(g[i]);
  free(rs);
  return rc;
}

/* This rank's device: --device BACKEND:N as given; a backend alone (or the
 * best one) is the local rank's device, index local % count, as torchrun's
 * LOCAL_RANK convention has it. `how` says which, for the rank's line. */
static int mpi_device(ag_device want, const dp_opts *dp, ag_device *out, char *how, size_t n) {
  *out = want;
  const char *name = ag_backend_name((ag_backend_kind)want.backend);
  if (dp->device_indexed) {
    snprintf(how, n, "--device %s:%d", name, want.index);
    return AG_EXIT_OK;
  }
  int count = ag_backend_device_count((ag_backend_kind)want.backend);
  if (count <= 1) {
    out->index = 0;
    snprintf(how, n, "the only %s device", name);
    return AG_EXIT_OK;
  }
  int local = 0;
  const char *src = NULL;
  if (ag_dist_local_rank(&local, &src) != AG_OK) {
    fprintf(stderr, "anygrad train: --dist mpi on %s (%d devices): %s; name one device (--device %s:N)\n", name,
            count, ag_last_error(), name);
    return AG_EXIT_USAGE;
  }
  out->index = (int16_t)(local % count);
  snprintf(how, n, "%s=%d, %d %s devices", src, local, count, name);
  return AG_EXIT_OK;
}

static int train_mpi(const charlm_options *o, const dp_opts *dp) {
  ag_group *g = NULL;
  ag_device dev;
  char how[160];
  int rc = mpi_device(o->device, dp, &dev, how, sizeof how);
  if (rc != AG_EXIT_OK) return rc;
  ag_status st = ag_group_create_mpi(dev, NULL, &g);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad train: --dist mpi: %s: %s\n", ag_status_name(st), ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  charlm_options ro = *o;
  ro.device = dev;
  ro.group = g;
  int rank = ag_group_rank(g);
  char hb[4096];
  if (o->heartbeat) { /* one file per rank */
    if (snprintf(hb, sizeof hb, "%s.%d", o->heartbeat, rank) >= (int)sizeof hb) {
      fprintf(stderr, "anygrad train: --heartbeat path too long\n");
      ag_group_destroy(g);
      return AG_EXIT_USAGE;
    }
    ro.heartbeat = hb;
  }
  if (!o->quiet) { /* every rank: where it runs */
    char label[32];
    printf("anygrad train: rank %d of %d on %s (%s)\n", rank, ag_group_size(g), ag_device_str(dev, label, sizeof label),
           how);
    fflush(stdout);
  }
  if (o->batch < ag_group_size(g)) { /* the replica count is known only now */
    if (rank == 0)
      fprintf(stderr, "anygrad train: --batch %lld is smaller than the %d MPI ranks: each replica needs at least "
                      "one example (--batch >= %d)\n", (long long)o->batch, ag_group_size(g), ag_group_size(g));
    ag_group_destroy(g);
    return AG_EXIT_USAGE;
  }
  if (rank == 0 && !o->quiet)
    printf("anygrad train: %d MPI ranks (global batch %lld, %s shares)\n", ag_group_size(g), (long long)o->batch,
           o->balance ? "balanced" : "equal");
  charlm_result r;
  st = charlm_train(&ro, &r);
  rc = AG_EXIT_OK;
  /* The rank that failed says why; the others were aborted by it. */
  if (st != AG_OK && (st != AG_ERR_ABORTED || rank == 0)) {
    fprintf(stderr, "anygrad train: rank %d: %s: %s\n", rank, ag_status_name(st), ag_last_error());
  }
  if (st != AG_OK) rc = AG_EXIT_RUNTIME;
  ag_group_destroy(g);
  return rc;
}

/* --task fashion-mnist --dist mpi: one CNN replica per process, the --batch
 * shared equally (cnn.h: batch norm over each replica's rows). */
static int train_cnn_mpi(const cnn_options *o, const dp_opts *dp) {
  ag_group *g = NULL;
  ag_device dev;
  char how[160];
  int rc = mpi_device(o->device, dp, &dev, how, sizeof how);
  if (rc != AG_EXIT_OK) return rc;
  ag_status st = ag_group_create_mpi(dev, NULL, &g);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad train: --dist mpi: %s: %s\n", ag_status_name(st), ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  int rank = ag_group_rank(g), size = ag_group_size(g);
  if (!o->quiet) {
    char label[32];
    printf("anygrad train: rank %d of %d on %s (%s)\n", rank, size, ag_device_str(dev, label, sizeof label), how);
    fflush(stdout);
  }
  if (o->batch < size) {
    if (rank == 0)
      fprintf(stderr, "anygrad train: --batch %lld is smaller than the %d MPI ranks (--batch >= %d)\n",
              (long long)o->batch, size, size);
    ag_group_destroy(g);
    return AG_EXIT_USAGE;
  }
  if (rank == 0 && !o->quiet)
    printf("anygrad train: %d MPI ranks (global batch %lld, equal shares)\n", size, (long long)o->batch);
  cnn_options ro = *o;
  ro.device = dev;
  ro.group = g;
  cnn_result r;
  st = cnn_train(&ro, &r);
  if (st != AG_OK && (st != AG_ERR_ABORTED || rank == 0))
    fprintf(stderr, "anygrad train: rank %d: %s: %s\n", rank, ag_status_name(st), ag_last_error());
  ag_group_destroy(g);
  return st == AG_OK ? AG_EXIT_OK : AG_EXIT_RUNTIME;
}

int ag_cmd_train(int argc, char **argv) {
  charlm_options o;
  bool task_cnn = false, task_text = false;
  dp_opts dp = {0};
  int rc = parse(argc, argv, &o, &task_cnn, &task_text, &dp);
  if (rc >= 0) return rc;
  if (task_text) {
    text_options to;
    rc = parse_text(argc, argv, &to);
    if (rc >= 0) return rc;
    text_result tr;
    ag_status tst = text_train(&to, &tr);
    if (tst != AG_OK) {
      fprintf(stderr, "anygrad train: %s: %s\n", ag_status_name(tst), ag_last_error());
      return AG_EXIT_RUNTIME;
    }
    return AG_EXIT_OK;
  }
  if (task_cnn) {
    cnn_options co;
    rc = parse_cnn(argc, argv, &co, &dp);
    if (rc >= 0) return rc;
    if (dp.mpi) return train_cnn_mpi(&co, &dp);
    cnn_result cr;
    ag_status cst = cnn_train(&co, &cr);
    if (cst != AG_OK) {
      fprintf(stderr, "anygrad train: %s: %s\n", ag_status_name(cst), ag_last_error());
      return AG_EXIT_RUNTIME;
    }
    return AG_EXIT_OK;
  }
  if (dp.n_devices) return train_inproc(&o, &dp);
  if (dp.mpi) return train_mpi(&o, &dp);
  charlm_result r;
  ag_status st = charlm_train(&o, &r);
  if (st != AG_OK) {
    fprintf(stderr, "anygrad train: %s: %s\n", ag_status_name(st), ag_last_error());
    return AG_EXIT_RUNTIME;
  }
  return AG_EXIT_OK;
}
