/* Instruction count of the launch path: N ag_add launches on 16-element f32
 * CPU tensors, each result released. Run under callgrind for two N and take
 * the difference, which leaves out start-up:
 *   cc -O2 -Iinclude bench/launch_count.c -Lbuild/lib -lanygrad -o /tmp/lc
 *   LD_LIBRARY_PATH=build/lib valgrind --tool=callgrind /tmp/lc 2000   (and 4000)
 * (docs/design/core.md, "Released handles", has the numbers.) */
#include <stdio.h>
#include <stdlib.h>

#include "anygrad/anygrad.h"

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  ag_set_num_threads(1);
  ag_tensor *a = ag_full(AG_CPU, AG_F32, 1, (int64_t[]){16}, 1.0);
  ag_tensor *b = ag_full(AG_CPU, AG_F32, 1, (int64_t[]){16}, 2.0);
  if (!a || !b) return fprintf(stderr, "%s\n", ag_last_error()), 1;
  for (int i = 0; i < n; i++) {
    ag_tensor *c = ag_add(a, b);
    if (!c) return fprintf(stderr, "%s\n", ag_last_error()), 1;
    ag_tensor_release(c);
  }
  ag_tensor_release(a);
  ag_tensor_release(b);
  return 0;
}
