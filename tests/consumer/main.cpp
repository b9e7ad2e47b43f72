// The public headers compiled as C++17 with -Wall -Wextra -pedantic -Werror:
// every macro (AG_CPU, AG_API, AG_VERSION_STRING) must be valid C++.
#include <anygrad/anygrad.h>

#include <cstdio>

int main() {
  const float data[3] = {1.5f, 2.5f, 6.0f};
  const int64_t shape[1] = {3};
  ag_tensor *x = ag_from_host(AG_CPU, AG_F32, 1, shape, data);
  ag_tensor *s = ag_sum(x, 0, nullptr, false);
  const double v = ag_item(s);
  std::printf("anygrad %s (C++): sum = %g\n", AG_VERSION_STRING, v);
  ag_tensor_release(s);
  ag_tensor_release(x);
  return v == 10.0 ? 0 : 1;
}
