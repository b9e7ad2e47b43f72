/* The shared word-list loader (words.h). */
#include "words.h"

#include "anygrad/checks.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void charlm_words_free(char **words, int n) {
  for (int i = 0; i < n; i++) free(words[i]);
  free(words);
}

ag_status charlm_words_load(const char *path, uint64_t seed, const char *who, char ***out_words, int *out_n) {
  *out_words = NULL;
  *out_n = 0;
  /* A regular file of bounded size (a FIFO or /dev/zero is refused at open,
   * never waited on or read without end). */
  int fd = -1;
  ag_status ost = ag_file_open_read(path, "word list", CHARLM_MAX_WORDS_BYTES, &fd, NULL);
  int err = errno;
  if (ost != AG_OK) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ag_last_error());
    return ag_error_set(ost, "%s: %s%s", who, msg, err == ENOENT ? " (Debian: apt-get install wamerican)" : "");
  }
  FILE *f = fdopen(fd, "r");
  if (!f) {
    close(fd);
    return ag_error_set(AG_ERR_OOM, "%s: cannot read %s: %s", who, path, strerror(errno));
  }
  char line[256];
  int n = 0, cap = 0;
  char **w = NULL;
  ag_status st = AG_OK;
  while (st == AG_OK && fgets(line, sizeof line, f)) {
    size_t len = strcspn(line, "\r\n");
    line[len] = 0;
    bool ok = len > 0 && len <= CHARLM_MAX_WORD;
    for (size_t i = 0; ok && i < len; i++) ok = line[i] >= 'a' && line[i] <= 'z';
    if (!ok) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 4096;
      char **nw = realloc(w, (size_t)cap * sizeof *nw);
      if (!nw) st = ag_error_set(AG_ERR_OOM, "%s: out of host memory", who);
      else w = nw;
    }
    if (st == AG_OK && !(w[n] = strdup(line))) st = ag_error_set(AG_ERR_OOM, "%s: out of host memory", who);
    if (st == AG_OK) n++;
  }
  fclose(f);
  if (st == AG_OK && n < 100) st = ag_error_set(AG_ERR_IO, "%s: %s holds only %d usable words", who, path, n);
  if (st != AG_OK) {
    charlm_words_free(w, n);
    return st;
  }
  uint64_t s = seed ^ 0x5eedull;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(charlm_splitmix(&s) % (uint64_t)(i + 1));
    char *t = w[i];
    w[i] = w[j];
    w[j] = t;
  }
  *out_words = w;
  *out_n = n;
  return AG_OK;
}
