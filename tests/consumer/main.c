/* A program outside anygrad's tree: create a tensor on the CPU, print its
 * sum, and check that the library it runs with is the one it was compiled
 * against. Built by scripts/consumer_test.sh through find_package,
 * pkg-config, add_subdirectory and FetchContent. */
#include <stdio.h>

#include <anygrad/anygrad.h>

int main(void) {
  if (ag_version(NULL, NULL, NULL) != AG_VERSION_NUMBER) {
    fprintf(stderr, "headers %s, library %s\n", AG_VERSION_STRING, ag_version_string());
    return 1;
  }
  const float data[4] = {1, 2, 3, 4};
  const int64_t shape[2] = {2, 2};
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 2, shape, data);
  ag_tensor *s = ag_sum(x, 0, NULL, false); /* all dims */
  double v = ag_item(s);
  if (!s) {
    fprintf(stderr, "anygrad: %s\n", ag_last_error());
    return 1;
  }
  printf("anygrad %s: sum = %g\n", ag_version_string(), v);
  ag_tensor_release(s);
  ag_tensor_release(x);
  return v == 10.0 ? 0 : 1;
}
