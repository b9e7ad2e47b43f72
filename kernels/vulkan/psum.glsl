/* The canonical sum S of docs/numerics.md inside one work-group of WG (256)
 * invocations: blocks of 256 terms, each summed by the fixed tree
 * (t[i] += t[i + s] for s = 128 .. 1, zeros past the end), then S again
 * over the block sums, level by level. The sums of rows of up to 2^24 terms
 * (three levels) are kept in shared memory. No subgroup operations: the
 * bits do not depend on the device's subgroup width. The kernel defines
 * `float pterm(int which, int64_t j)`, the j-th term of the sum `which`,
 * before including this file; every invocation of the group calls psum
 * (barriers). Portable builds only (AG_PORTABLE). */
shared float ps_t[WG];
shared float ps_l1[WG];
shared float ps_l2[WG];

/* the tree over the group's 256 values v (one per invocation) */
float ps_tree(float v) {
  uint l = gl_LocalInvocationID.x;
  ps_t[l] = v;
  barrier();
  for (uint s = WG / 2; s > 0u; s >>= 1) {
    if (l < s) {
      precise float t = ps_t[l] + ps_t[l + s];
      ps_t[l] = t;
    }
    barrier();
  }
  float r = ps_t[0];
  barrier();
  return r;
}

/* S(pterm(which, 0 .. n)) for n <= 2^24 */
float psum(int which, int64_t n) {
  uint l = gl_LocalInvocationID.x;
  int64_t n1 = n <= 0l ? 1l : (n + WG - 1) / WG;
  float r = 0.0;
  for (int64_t b = 0; b < n1; b++) {
    int64_t j = b * WG + int64_t(l);
    r = ps_tree(j < n ? pterm(which, j) : 0.0);
    if (n1 == 1l) return r;
    if (l == 0u) ps_l1[uint(b % WG)] = r;
    barrier();
    if (b % WG == WG - 1 || b == n1 - 1l) {
      /* a level-2 block is complete: its tree over the level-1 sums */
      int64_t cnt = b % WG + 1;
      float v = int64_t(l) < cnt ? ps_l1[l] : 0.0;
      r = ps_tree(v);
      if (l == 0u) ps_l2[uint(b / WG)] = r;
      barrier();
    }
  }
  int64_t n2 = (n1 + WG - 1) / WG;
  if (n2 == 1l) return r;
  return ps_tree(int64_t(l) < n2 ? ps_l2[l] : 0.0);
}
