/* The float-controls declarations of a SPIR-V module, rewritten word by
 * word: the SignedZeroInfNanPreserve execution mode (NaN, infinities and
 * signed zeros not assumed away) for 32- and 64-bit floats. Used at build
 * time by vk_spirv_modes.c (glslang keeps one spirv_execution_mode per mode,
 * so a module with f64 gets its second declaration there) and at run time
 * by the module (a device without shaderSignedZeroInfNanPreserveFloat32/64
 * gets the declarations it cannot take removed). Header-only, no Vulkan. */
#ifndef AG_VK_SPIRV_H
#define AG_VK_SPIRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
  VKB_SPV_MAGIC = 0x07230203u,
  VKB_SPV_OP_CAPABILITY = 17,
  VKB_SPV_OP_ENTRY_POINT = 15,
  VKB_SPV_OP_EXECUTION_MODE = 16,
  VKB_SPV_CAP_FLOAT64 = 10,
  VKB_SPV_CAP_SZINP = 4466,  /* SignedZeroInfNanPreserve */
  VKB_SPV_MODE_SZINP = 4461, /* SignedZeroInfNanPreserve <bit width> */
  VKB_SPV_CAP_DENORM_PRESERVE = 4464,
  VKB_SPV_MODE_DENORM_PRESERVE = 4459, /* DenormPreserve <bit width> */
};

/* Whether `in` (n words) is a module whose instructions tile it exactly;
 * *out_f64 (may be NULL) tells whether it declares the Float64 capability. */
static inline bool vkb_spirv_valid(const uint32_t *in, size_t n, bool *out_f64) {
  if (n < 5 || in[0] != VKB_SPV_MAGIC) return false;
  bool f64 = false;
  for (size_t i = 5; i < n;) {
    uint32_t len = in[i] >> 16, op = in[i] & 0xffffu;
    if (len == 0 || len > n - i) return false;
    if (op == VKB_SPV_OP_CAPABILITY && len == 2 && in[i + 1] == VKB_SPV_CAP_FLOAT64) f64 = true;
    i += len;
  }
  if (out_f64) *out_f64 = f64;
  return true;
}

/* Copies module `in` (n words, vkb_spirv_valid) to `out` (room for n + 10
 * words) with SignedZeroInfNanPreserve declared for 32-bit floats when
 * want32, for 64-bit floats when want64 (and the module has Float64), and
 * nowhere else: existing declarations are dropped, the capability is
 * declared after the module's first capability and the modes (for the
 * first entry point) where the execution modes begin. The capability is
 * core in SPIR-V 1.4 (the modules are 1.5: --target-env=vulkan1.2), so no
 * OpExtension is needed. Returns the output's word count, 0 for a module
 * without an entry point. */
static inline size_t vkb_spirv_float_modes(const uint32_t *in, size_t n, bool want32, bool want64, uint32_t *out) {
  bool f64 = false;
  if (!vkb_spirv_valid(in, n, &f64)) return 0;
  want64 = want64 && f64;
  size_t o = 0;
  for (; o < 5; o++) out[o] = in[o];
  bool cap_done = !(want32 || want64), mode_done = false;
  uint32_t entry = 0;
  for (size_t i = 5; i < n;) {
    uint32_t len = in[i] >> 16, op = in[i] & 0xffffu;
    /* the sections before the execution modes: capabilities, extensions,
     * imports, the memory model, entry points */
    bool head = op == VKB_SPV_OP_CAPABILITY || op == 10 || op == 11 || op == 14 || op == VKB_SPV_OP_ENTRY_POINT;
    if (!head && !mode_done && entry) {
      for (int w = 0; w < 2; w++)
        if (w == 0 ? want32 : want64) {
          out[o++] = (4u << 16) | VKB_SPV_OP_EXECUTION_MODE;
          out[o++] = entry;
          out[o++] = VKB_SPV_MODE_SZINP;
          out[o++] = w == 0 ? 32u : 64u;
        }
      mode_done = true;
    }
    bool drop = (op == VKB_SPV_OP_CAPABILITY && len == 2 && in[i + 1] == VKB_SPV_CAP_SZINP) ||
                (op == VKB_SPV_OP_EXECUTION_MODE && len == 4 && in[i + 2] == VKB_SPV_MODE_SZINP);
    if (!drop)
      for (uint32_t k = 0; k < len; k++) out[o++] = in[i + k];
    if (op == VKB_SPV_OP_CAPABILITY && !cap_done) {
      out[o++] = (2u << 16) | VKB_SPV_OP_CAPABILITY;
      out[o++] = VKB_SPV_CAP_SZINP;
      cap_done = true;
    }
    if (op == VKB_SPV_OP_ENTRY_POINT && len >= 3 && !entry) entry = in[i + 2];
    i += len;
  }
  return mode_done ? o : 0;
}

/* Copies module `in` (n words, vkb_spirv_valid) to `out` (room for n + 6
 * words) with capability `cap` declared after the module's first capability
 * and the execution mode `mode <width>` for its first entry point where
 * the execution modes begin (DenormPreserve 32 for the portable modules on
 * a device with shaderDenormPreserveFloat32). Returns the output's word
 * count, 0 for a module without an entry point. */
static inline size_t vkb_spirv_add_mode(const uint32_t *in, size_t n, uint32_t cap, uint32_t mode, uint32_t width,
                                        uint32_t *out) {
  if (!vkb_spirv_valid(in, n, NULL)) return 0;
  size_t o = 0;
  for (; o < 5; o++) out[o] = in[o];
  bool cap_done = false, mode_done = false;
  uint32_t entry = 0;
  for (size_t i = 5; i < n;) {
    uint32_t len = in[i] >> 16, op = in[i] & 0xffffu;
    bool head = op == VKB_SPV_OP_CAPABILITY || op == 10 || op == 11 || op == 14 || op == VKB_SPV_OP_ENTRY_POINT;
    if (!head && !mode_done && entry) {
      out[o++] = (4u << 16) | VKB_SPV_OP_EXECUTION_MODE;
      out[o++] = entry;
      out[o++] = mode;
      out[o++] = width;
      mode_done = true;
    }
    for (uint32_t k = 0; k < len; k++) out[o++] = in[i + k];
    if (op == VKB_SPV_OP_CAPABILITY && !cap_done) {
      out[o++] = (2u << 16) | VKB_SPV_OP_CAPABILITY;
      out[o++] = cap;
      cap_done = true;
    }
    if (op == VKB_SPV_OP_ENTRY_POINT && len >= 3 && !entry) entry = in[i + 2];
    i += len;
  }
  return mode_done ? o : 0;
}

#endif
