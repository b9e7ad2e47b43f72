/* The canonical sum S of docs/numerics.md inside one work-group of WG (256)
 * invocations: blocks of 256 terms, each summed by the fixed tree
 * (t[i] += t[i + s] for s = 128 .. 1, zeros past the end), then S again
 * over the block sums, level by level. The sums of rows of up to 2^24 terms
 * (three levels) are kept in shared memory. No subgroup operations: the
 * bits do not depend on the device's subgroup width. The kernel defines
 * `float pterm(int which, int64_t j)`, the j-th term of the sum `which`,
 * before including this file; every invocation of the group calls psum
 * (barriers). Portable builds only (AG_PORTABLE).
 *
 * Lines of at most 256 terms (one block) may instead take an invocation
 * each (k5 set by the host: psum1, the same tree evaluated in registers,
 * no barrier): a work-group per line of a few terms would spend its time
 * in barriers. The kernels write their loops with P_LINE, P_LANE, P_STEP
 * and P_LEAD, and their sums with psum_any, to run either way. */
#include "pline.glsl"
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

/* The trees of 16 blocks at once, without a barrier per step: invocation
 * l = 16 g + u sums the leaves u + 16 m (m < 16) of block b0 + g, which
 * the steps s = 128 .. 16 of the block's tree pair among themselves (step
 * s = 16 s' pairs leaf u + 16 m with u + 16 (m + s')), then the steps 8 .. 1
 * run over the 16 partial trees of each block in shared memory. Block
 * b0 + g's sum is left in ps_t[16 g]. */
void ps_tree16(int which, int64_t n, int64_t b0, int64_t n1) {
  uint l = gl_LocalInvocationID.x, u = l & 15u;
  int64_t blk = b0 + int64_t(l >> 4);
  precise float v[16];
  for (int m = 0; m < 16; m++) {
    int64_t j = blk * WG + int64_t(u) + 16 * m;
    v[m] = blk < n1 && j < n ? pterm(which, j) : 0.0;
  }
  for (int s = 8; s > 0; s >>= 1)
    for (int m = 0; m < s; m++) v[m] = v[m] + v[m + s];
  ps_t[l] = v[0];
  barrier();
  for (uint s = 8u; s > 0u; s >>= 1) {
    if (u < s) {
      precise float t = ps_t[l] + ps_t[l + s];
      ps_t[l] = t;
    }
    barrier();
  }
}

/* S(pterm(which, 0 .. n)) for n <= 2^24 */
float psum(int which, int64_t n) {
  uint l = gl_LocalInvocationID.x;
  int64_t n1 = n <= 0l ? 1l : (n + WG - 1) / WG;
  float r = 0.0;
  for (int64_t b0 = 0; b0 < n1; b0 += 16) {
    ps_tree16(which, n, b0, n1);
    if (n1 == 1l) {
      r = ps_t[0];
      barrier();
      return r;
    }
    if (l < 16u && b0 + int64_t(l) < n1) ps_l1[uint((b0 + int64_t(l)) % WG)] = ps_t[16u * l];
    barrier();
    int64_t last = min(b0 + 16, n1) - 1l;
    if (last % WG == WG - 1 || last == n1 - 1l) {
      /* a level-2 block is complete: its tree over the level-1 sums */
      int64_t cnt = last % WG + 1;
      r = ps_tree(int64_t(l) < cnt ? ps_l1[l] : 0.0);
      if (l == 0u) ps_l2[uint(last / WG)] = r;
      barrier();
    }
  }
  int64_t n2 = (n1 + WG - 1) / WG;
  if (n2 == 1l) return r;
  return ps_tree(int64_t(l) < n2 ? ps_l2[l] : 0.0);
}

/* S(pterm(which, 0 .. n)) for n <= 256 in one invocation: with m the
 * power of two >= n, the steps s >= m of the block's tree only add +0 to
 * each term (v + 0: -0 becomes +0) and the rest is the tree over m leaves,
 * evaluated leaf by leaf in bit-reversed order with a stack of partial
 * sums (each pair merged as soon as it is complete, left + right). */
float psum1(int which, int64_t n) {
  if (n <= 0l) return 0.0;
  int m = 1, bits = 0;
  while (int64_t(m) < n) {
    m <<= 1;
    bits++;
  }
  precise float stk[9];
  int sp = 0;
  for (int k = 0; k < m; k++) {
    int i = bits == 0 ? 0 : int(bitfieldReverse(uint(k)) >> uint(32 - bits));
    precise float v = int64_t(i) < n ? pterm(which, int64_t(i)) : 0.0;
    if (m < WG) v = v + 0.0;
    for (int kk = k; (kk & 1) == 1; kk >>= 1) {
      sp--;
      v = stk[sp] + v;
    }
    stk[sp] = v;
    sp++;
  }
  return stk[0];
}

/* S either way (psum: the work-group's, barriers; psum1: one invocation's) */
float psum_any(int which, int64_t n) { return P_SINGLE ? psum1(which, n) : psum(which, n); }
