/* `anygrad export`: a Llama saved in the Hugging Face layout (a folder of
 * `anygrad train --task text --hf DIR` or transformers' save_pretrained)
 * written in other formats (docs/export.md). Each format is one row of
 * k_formats: its output option, its --help lines and its writer; the folder
 * is read once and every format asked for is written from it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anygrad/anygrad.h"
#include "cli.h"

typedef struct export_opts {
  ag_gguf_type gguf_type;
} export_opts;

typedef struct export_format {
  const char *opt;  /* the output option, "--gguf" */
  const char *help; /* its --help lines */
  bool needs_tokenizer;
  ag_status (*write)(const ag_llama *m, const ag_bpe *tok, const char *path, const export_opts *o);
} export_format;

static ag_status write_gguf(const ag_llama *m, const ag_bpe *tok, const char *path, const export_opts *o) {
  return ag_llama_save_gguf(m, tok, path, o->gguf_type);
}

static const export_format k_formats[] = {
    {"--gguf",
     "  --gguf PATH          a GGUF file for llama.cpp: metadata, the tokenizer, the weights\n"
     "  --type T             the GGUF weight type: f32 (default), f16 or q8_0 (norms stay f32)\n",
     true, write_gguf},
};
enum { N_FORMATS = (int)(sizeof k_formats / sizeof k_formats[0]) };

static void usage(void) {
  printf("usage: anygrad export --from DIR [--gguf PATH [--type T]]\n\n"
         "Writes the Llama of a Hugging Face folder (config.json, model.safetensors, tokenizer.json:\n"
         "docs/export.md) in other formats. Each output replaces its file only when complete.\n"
         "  --from DIR           the folder (anygrad train --task text --hf DIR, or transformers'\n"
         "                       save_pretrained of a LlamaForCausalLM)\n");
  for (int i = 0; i < N_FORMATS; i++) fputs(k_formats[i].help, stdout);
  printf(AG_CLI_THREADS_HELP AG_CLI_EXIT_HELP);
}

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

int ag_cmd_export(int argc, char **argv) {
  const char *from = NULL, *out[N_FORMATS] = {0}, *type_s = NULL;
  enum { O_FROM = 256, O_TYPE, O_HELP, O_FORMAT0 };
  struct option opts[N_FORMATS + 5] = {{"from", required_argument, NULL, O_FROM},
                                       {"type", required_argument, NULL, O_TYPE},
                                       {"help", no_argument, NULL, O_HELP},
                                       AG_CLI_THREADS_OPT};
  for (int i = 0; i < N_FORMATS; i++) opts[4 + i] = (struct option){k_formats[i].opt + 2, required_argument, NULL,
                                                                    O_FORMAT0 + i};
  export_opts eo = {.gguf_type = AG_GGUF_F32};
  for (int c = ag_cli_next("export", argc, argv, opts, true); c != -1;
       c = ag_cli_next("export", argc, argv, opts, false)) {
    switch (c) {
      case O_HELP: usage(); return AG_EXIT_OK;
      case O_FROM: from = ag_cli_arg(); break;
      case O_TYPE: type_s = ag_cli_arg(); break;
      case AG_CLI_THREADS:
        if (!ag_cli_threads("export", ag_cli_arg())) return AG_EXIT_USAGE;
        break;
      default:
        if (c >= O_FORMAT0 && c < O_FORMAT0 + N_FORMATS) {
          out[c - O_FORMAT0] = ag_cli_arg();
          break;
        }
        return AG_EXIT_USAGE;
    }
  }
  int n_out = 0;
  for (int i = 0; i < N_FORMATS; i++) n_out += out[i] != NULL;
  if (!from || !n_out) {
    fprintf(stderr, "anygrad export: needs --from DIR and at least one output (--gguf PATH)\n");
    return AG_EXIT_USAGE;
  }
  if (type_s) {
    if (!out[0]) {
      fprintf(stderr, "anygrad export: --type applies to --gguf\n");
      return AG_EXIT_USAGE;
    }
    if (ag_gguf_type_parse(type_s, &eo.gguf_type) != AG_OK) {
      char b[64];
      fprintf(stderr, "anygrad export: --type expects f32, f16 or q8_0, got '%s'\n", ag_escape(type_s, b, sizeof b));
      return AG_EXIT_USAGE;
    }
  }
  /* Outputs distinct from the folder's files and from each other, and
   * writable, before the model is read. */
  static const char *const k_in[] = {"config.json", "model.safetensors", "tokenizer.json"};
  char *in_paths[3] = {0};
  ag_cli_file ins[3], outs[N_FORMATS];
  int rc = AG_EXIT_OK, no = 0;
  for (int i = 0; i < 3; i++) {
    if (!(in_paths[i] = join(from, k_in[i]))) {
      fprintf(stderr, "anygrad export: out of memory\n");
      rc = AG_EXIT_RUNTIME;
      goto done;
    }
    ins[i] = (ag_cli_file){"--from", in_paths[i]};
  }
  for (int i = 0; i < N_FORMATS; i++)
    if (out[i]) outs[no++] = (ag_cli_file){k_formats[i].opt, out[i]};
  if (!ag_cli_outputs_distinct("export", ins, 3, outs, no)) {
    rc = AG_EXIT_USAGE;
    goto done;
  }
  for (int i = 0; i < N_FORMATS; i++)
    if (out[i] && ag_output_check(out[i], k_formats[i].opt + 2) != AG_OK) {
      fprintf(stderr, "anygrad export: %s %s\n", k_formats[i].opt, ag_last_error());
      rc = AG_EXIT_RUNTIME;
      goto done;
    }
  ag_llama m;
  ag_bpe *tok = NULL;
  if (ag_llama_load_pretrained(from, AG_CPU, &m, &tok) != AG_OK) {
    fprintf(stderr, "anygrad export: %s\n", ag_last_error());
    rc = AG_EXIT_RUNTIME;
    goto done;
  }
  for (int i = 0; i < N_FORMATS && rc == AG_EXIT_OK; i++) {
    if (!out[i]) continue;
    if (k_formats[i].needs_tokenizer && !tok) {
      fprintf(stderr, "anygrad export: %s needs a tokenizer, and %s has no tokenizer.json\n", k_formats[i].opt,
              from);
      rc = AG_EXIT_RUNTIME;
    } else if (k_formats[i].write(&m, tok, out[i], &eo) != AG_OK) {
      fprintf(stderr, "anygrad export: %s\n", ag_last_error());
      rc = AG_EXIT_RUNTIME;
    } else {
      printf("wrote %s\n", out[i]);
    }
  }
  ag_bpe_free(tok);
  ag_llama_free(&m);
done:
  for (int i = 0; i < 3; i++) free(in_paths[i]);
  return rc;
}
