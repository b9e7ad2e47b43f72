/* Vulkan backend: the loader opened at run time, instance and device
 * discovery, the validation messenger, device memory (VkBuffers with device
 * addresses), pinned host memory, the pipeline cache, the error translation
 * and the vtable the module exports. Streams are in vk_queue.c, kernels in
 * vk_launch.c. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vk_internal.h"
#include "vk_spirv.h"

#include "anygrad/checks.h"

/* The device table is this module's registry: filled once by init under
 * g_init_lock, read-only afterwards (per-device mutable parts have their own
 * locks). Pinned blocks are tracked in a table under g_pin_lock. The
 * validation counters are atomics written by the messenger callback, which
 * the layers may call from any thread. */
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_inited;
static ag_status g_init_status;
static char g_init_reason[512];
static int g_count;
static vkb_device g_dev[AG_MAX_DEVICES];
static void *g_lib;
static VkInstance g_instance;
static VkDebugUtilsMessengerEXT g_messenger;
static atomic_int g_val_messages, g_val_reported;
static bool g_validation;
VKB_HIDDEN vkb_fns vkb_f;

typedef struct vkb_pinned {
  vkb_mem m;
  int dev;
} vkb_pinned;
static pthread_mutex_t g_pin_lock = PTHREAD_MUTEX_INITIALIZER;
static vkb_pinned *g_pin;
static size_t g_pin_n, g_pin_cap;

/* AG_VULKAN_TEST, a test switch (docs/vulkan.md): what a device could be
 * like that lavapipe is not. Read once by init. */
static struct {
  bool noncoherent;            /* no memory but pinned blocks is HOST_COHERENT */
  bool no_float_controls;      /* no SignedZeroInfNanPreserve */
  uint64_t max_buffer_size;    /* a smaller maxBufferSize (0: the device's) */
  uint64_t max_workgroup_size; /* a smaller maxComputeWorkGroupSize[0] and invocation count */
  bool slow_f64;               /* f64 taken as slow (a GPU's): f32 dropout and normal fill */
  bool device_local_args;      /* argument blocks copied to device-local memory (a discrete GPU's) */
  bool mapped_args;            /* argument blocks in device-local host-visible memory (ReBAR) */
  bool no_subgroup;            /* no subgroup arithmetic: the tree passes' shared-memory trees */
  bool gemm_generic;           /* gemm.comp for every matmul (no register-blocked gemm_tiled.comp) */
  uint64_t gemm_tile;          /* gemm_tiled.comp's tile (its CFG; 0: VKB_GEMM_CFG) */
} g_test;

/* Parses AG_VULKAN_TEST: a comma list of noncoherent, no_float_controls, slow_f64,
 * device_local_args, mapped_args, no_subgroup, gemm_generic, max_buffer_size:BYTES,
 * max_workgroup_size:N, gemm_tile:CFG. */
static bool parse_test_switch(char *why, size_t why_len) {
  const char *v = getenv("AG_VULKAN_TEST");
  memset(&g_test, 0, sizeof g_test);
  if (!v || !*v) return true;
  char buf[256], shown[96];
  if (strlen(v) >= sizeof buf) {
    snprintf(why, why_len, "AG_VULKAN_TEST='%s' is too long", ag_escape(v, shown, sizeof shown));
    return false;
  }
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
    char *colon = strchr(item, ':');
    if (colon) *colon = '\0';
    uint64_t n = 0;
    bool num_ok = colon && ag_parse_u64(colon + 1, &n) && n > 0;
    if (!colon && !strcmp(item, "noncoherent")) g_test.noncoherent = true;
    else if (!colon && !strcmp(item, "no_float_controls")) g_test.no_float_controls = true;
    else if (!colon && !strcmp(item, "slow_f64")) g_test.slow_f64 = true;
    else if (!colon && !strcmp(item, "device_local_args")) g_test.device_local_args = true;
    else if (!colon && !strcmp(item, "mapped_args")) g_test.mapped_args = true;
    else if (!colon && !strcmp(item, "no_subgroup")) g_test.no_subgroup = true;
    else if (!colon && !strcmp(item, "gemm_generic")) g_test.gemm_generic = true;
    else if (!strcmp(item, "gemm_tile") && num_ok && vkb_gemm_cfg_ok(n)) g_test.gemm_tile = n;
    else if (!strcmp(item, "max_buffer_size") && num_ok) g_test.max_buffer_size = n;
    else if (!strcmp(item, "max_workgroup_size") && num_ok && n <= UINT32_MAX) g_test.max_workgroup_size = n;
    else {
      snprintf(why, why_len,
               "AG_VULKAN_TEST='%s' is not a comma list of noncoherent, no_float_controls, slow_f64, "
               "device_local_args, mapped_args, no_subgroup, gemm_generic, max_buffer_size:BYTES, "
               "max_workgroup_size:N, gemm_tile:CFG (TM | TN << 4 | BK << 8; TM, TN 4, 8 or 12, BK 4 to 60 "
               "in steps of 4)",
               ag_escape(v, shown, sizeof shown));
      return false;
    }
  }
  return true;
}

static const char *vk_result_name(VkResult r) {
  switch (r) {
#define C(x) case x: return #x
    C(VK_SUCCESS); C(VK_NOT_READY); C(VK_TIMEOUT); C(VK_INCOMPLETE);
    C(VK_ERROR_OUT_OF_HOST_MEMORY); C(VK_ERROR_OUT_OF_DEVICE_MEMORY); C(VK_ERROR_INITIALIZATION_FAILED);
    C(VK_ERROR_DEVICE_LOST); C(VK_ERROR_MEMORY_MAP_FAILED); C(VK_ERROR_LAYER_NOT_PRESENT);
    C(VK_ERROR_EXTENSION_NOT_PRESENT); C(VK_ERROR_FEATURE_NOT_PRESENT); C(VK_ERROR_INCOMPATIBLE_DRIVER);
    C(VK_ERROR_TOO_MANY_OBJECTS); C(VK_ERROR_FORMAT_NOT_SUPPORTED); C(VK_ERROR_FRAGMENTED_POOL);
    C(VK_ERROR_UNKNOWN); C(VK_ERROR_OUT_OF_POOL_MEMORY); C(VK_ERROR_INVALID_EXTERNAL_HANDLE);
    C(VK_ERROR_FRAGMENTATION); C(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS);
#undef C
    default: return NULL;
  }
}

ag_status vkb_error(VkResult r, const char *what) {
  const char *name = vk_result_name(r);
  char buf[32];
  if (!name) {
    snprintf(buf, sizeof buf, "VkResult %d", (int)r);
    name = buf;
  }
  ag_status s = AG_ERR_BACKEND;
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY ||
      r == VK_ERROR_TOO_MANY_OBJECTS || r == VK_ERROR_FRAGMENTATION)
    s = AG_ERR_OOM;
  else if (r == VK_ERROR_INITIALIZATION_FAILED || r == VK_ERROR_INCOMPATIBLE_DRIVER)
    s = AG_ERR_UNAVAILABLE;
  return ag_error_set(s, "vulkan: %s: %s%s", what, name,
                      r == VK_ERROR_DEVICE_LOST ? " (the device was lost or a shader faulted)" : "");
}

vkb_device *vkb_dev(int dev) { return &g_dev[dev]; }

static ag_status open_device(vkb_device *d, char *why, size_t why_len);

vkb_device *vkb_dev_open(int dev) {
  vkb_device *d = &g_dev[dev];
  pthread_mutex_lock(&g_init_lock);
  if (!d->opened) {
    d->opened = true;
    d->open_status = open_device(d, d->open_why, sizeof d->open_why);
  }
  ag_status st = d->open_status;
  pthread_mutex_unlock(&g_init_lock);
  if (st != AG_OK) {
    ag_error_set(st, "vulkan: %s", d->open_why);
    return NULL;
  }
  return d;
}

/* ---- validation ----
 * Requested by AG_VULKAN_VALIDATION=1 (the module enables
 * VK_LAYER_KHRONOS_validation with synchronization validation itself) or by
 * naming the layer in VK_INSTANCE_LAYERS (the loader enables it; the
 * layer's own settings apply). Either way every warning or error message is
 * printed to stderr and counted: the next stream or event synchronization
 * returns AG_ERR_BACKEND, and the process exit status becomes 97 at exit, so
 * a test under the layers fails on any message. */
static VKAPI_ATTR VkBool32 VKAPI_CALL on_message(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                                 VkDebugUtilsMessageTypeFlagsEXT type,
                                                 const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                 void *user) {
  (void)user;
  /* general messages are the loader's (which layers it added): shown,
   * not counted */
  bool counted = (type & (VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)) &&
                 (sev & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT));
  if (counted) atomic_fetch_add(&g_val_messages, 1);
  if (counted || (sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT))
    fprintf(stderr, "anygrad vulkan validation: %s\n", data && data->pMessage ? data->pMessage : "(no text)");
  return VK_FALSE;
}

static void validation_exit(void) {
  int n = atomic_load(&g_val_messages);
  if (n > 0) {
    fprintf(stderr, "anygrad vulkan validation: %d message(s); exit status 97\n", n);
    fflush(NULL);
    _exit(97);
  }
}

ag_status vkb_validation_status(void) {
  if (!g_validation) return AG_OK;
  int n = atomic_load(&g_val_messages), r = atomic_load(&g_val_reported);
  if (n == r) return AG_OK;
  atomic_store(&g_val_reported, n);
  return ag_error_set(AG_ERR_BACKEND, "vulkan: the validation layers reported %d message(s) (see stderr)", n);
}

static bool has_instance_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(e[i].extensionName, name)) return true;
  return false;
}

static bool has_layer(const char *name) {
  uint32_t n = 0;
  if (vkb_f.vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || !n) return false;
  VkLayerProperties *l = calloc(n, sizeof *l);
  bool found = false;
  if (l && vkb_f.vkEnumerateInstanceLayerProperties(&n, l) == VK_SUCCESS)
    for (uint32_t i = 0; i < n && !found; i++) found = !strcmp(l[i].layerName, name);
  free(l);
  return found;
}

static bool dev_has_ext(VkPhysicalDevice p, const char *name) {
  uint32_t n = 0;
  if (vkb_f.vkEnumerateDeviceExtensionProperties(p, NULL, &n, NULL) != VK_SUCCESS || !n) return false;
  VkExtensionProperties *e = calloc(n, sizeof *e);
  bool found = false;
  if (e && vkb_f.vkEnumerateDeviceExtensionProperties(p, NULL, &n, e) == VK_SUCCESS)
    found = has_instance_ext(e, n, name);
  free(e);
  return found;
}

static ag_status create_instance(char *why, size_t why_len) {
  const char *req = getenv("AG_VULKAN_VALIDATION");
  const char *env_layers = getenv("VK_INSTANCE_LAYERS");
  if (req && *req && strcmp(req, "0") && strcmp(req, "1")) {
    char shown[64];
    snprintf(why, why_len, "AG_VULKAN_VALIDATION='%s' is not 0 or 1", ag_escape(req, shown, sizeof shown));
    return AG_ERR_UNAVAILABLE;
  }
  bool own = req && !strcmp(req, "1");
  g_validation = own || (env_layers && strstr(env_layers, "VK_LAYER_KHRONOS_validation"));
  uint32_t ne = 0;
  vkb_f.vkEnumerateInstanceExtensionProperties(NULL, &ne, NULL);
  VkExtensionProperties *ext = calloc(ne ? ne : 1, sizeof *ext);
  if (ext) vkb_f.vkEnumerateInstanceExtensionProperties(NULL, &ne, ext);
  bool dbg = ext && has_instance_ext(ext, ne, VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  free(ext);
  const char *layers[1] = {"VK_LAYER_KHRONOS_validation"};
  bool layer = own && has_layer(layers[0]);
  if (own && !layer) {
    snprintf(why, why_len, "AG_VULKAN_VALIDATION is set but VK_LAYER_KHRONOS_validation is not installed "
                           "(vulkan-validationlayers)");
    return AG_ERR_UNAVAILABLE;
  }
  const char *exts[1] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  VkValidationFeatureEnableEXT enables[] = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
  VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                                .enabledValidationFeatureCount = 1,
                                .pEnabledValidationFeatures = enables};
  VkDebugUtilsMessengerCreateInfoEXT mci = {
      .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
      .pNext = layer ? &vf : NULL,
      .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
      .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
      .pfnUserCallback = on_message};
  bool messenger = g_validation && dbg;
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
                           .pApplicationName = "anygrad",
                           .pEngineName = "anygrad",
                           .apiVersion = VK_API_VERSION_1_2};
  VkInstanceCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                             .pNext = messenger ? (const void *)&mci : (layer ? (const void *)&vf : NULL),
                             .pApplicationInfo = &app,
                             .enabledLayerCount = layer ? 1u : 0u,
                             .ppEnabledLayerNames = layers,
                             .enabledExtensionCount = messenger ? 1u : 0u,
                             .ppEnabledExtensionNames = exts};
  VkResult r = vkb_f.vkCreateInstance(&ci, NULL, &g_instance);
  if (r != VK_SUCCESS) {
    snprintf(why, why_len, "vkCreateInstance failed (%s)",
             vk_result_name(r) ? vk_result_name(r) : "unknown VkResult");
    return AG_ERR_UNAVAILABLE;
  }
#define VKB_LOAD_I(fn) vkb_f.fn = (PFN_##fn)vkb_f.vkGetInstanceProcAddr(g_instance, #fn);
  VKB_INSTANCE_FNS(VKB_LOAD_I)
#undef VKB_LOAD_I
  if (messenger) {
    vkb_f.vkCreateDebugUtilsMessengerEXT =
        (PFN_vkCreateDebugUtilsMessengerEXT)vkb_f.vkGetInstanceProcAddr(g_instance, "vkCreateDebugUtilsMessengerEXT");
    vkb_f.vkDestroyDebugUtilsMessengerEXT =
        (PFN_vkDestroyDebugUtilsMessengerEXT)vkb_f.vkGetInstanceProcAddr(g_instance, "vkDestroyDebugUtilsMessengerEXT");
    mci.pNext = NULL;
    if (vkb_f.vkCreateDebugUtilsMessengerEXT)
      vkb_f.vkCreateDebugUtilsMessengerEXT(g_instance, &mci, NULL, &g_messenger);
  }
  if (g_validation) atexit(validation_exit);
  return AG_OK;
}

static uint32_t pick_type(const VkPhysicalDeviceMemoryProperties *mp, VkMemoryPropertyFlags want,
                          VkMemoryPropertyFlags avoid) {
  for (uint32_t i = 0; i < mp->memoryTypeCount; i++) {
    VkMemoryPropertyFlags f = mp->memoryTypes[i].propertyFlags;
    if ((f & want) == want && !(f & avoid)) return i;
  }
  return UINT32_MAX;
}

/* A physical device qualifies with Vulkan 1.2, a compute queue and the
 * features the shaders use; otherwise *why says what is missing. */
static ag_status add_device(VkPhysicalDevice p, char *why, size_t why_len) {
  vkb_device *d = &g_dev[g_count];
  memset(d, 0, sizeof *d);
  d->phys = p;
  VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties sg = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                           .pNext = &drv};
  VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &sg};
  vkb_f.vkGetPhysicalDeviceProperties2(p, &p2);
  d->props = p2.properties;
  d->subgroup_size = sg.subgroupSize;
  /* the tree passes' subgroup build (tree.comp K_TREE_SG) where compute
   * shaders have subgroup arithmetic */
  d->subgroup_arith = (sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                      (sg.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) &&
                      (sg.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                      (sg.supportedOperations & VK_SUBGROUP_FEATURE_VOTE_BIT) && !g_test.no_subgroup;
  snprintf(d->driver, sizeof d->driver, "%.63s", drv.driverName[0] ? drv.driverName : "unknown driver");
  d->loop_limit = drv.driverID == VK_DRIVER_ID_MESA_LLVMPIPE ? 65000 : INT64_MAX;
  const char *name = d->props.deviceName;
  if (d->props.apiVersion < VK_API_VERSION_1_2) {
    snprintf(why, why_len, "%s: Vulkan 1.2 needed", name);
    return AG_ERR_UNAVAILABLE;
  }
  VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                          .pNext = &f12};
  VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f11};
  vkb_f.vkGetPhysicalDeviceFeatures2(p, &f2);
  VkPhysicalDeviceLimits *lim = &d->props.limits;
  if (g_test.max_workgroup_size) {
    uint32_t t = (uint32_t)g_test.max_workgroup_size;
    if (lim->maxComputeWorkGroupSize[0] > t) lim->maxComputeWorkGroupSize[0] = t;
    if (lim->maxComputeWorkGroupInvocations > t) lim->maxComputeWorkGroupInvocations = t;
  }
  const char *miss = !f12.bufferDeviceAddress          ? "bufferDeviceAddress"
                     : !f12.timelineSemaphore          ? "timelineSemaphore"
                     : !f2.features.shaderInt64        ? "shaderInt64"
                     : !f12.storageBuffer8BitAccess    ? "storageBuffer8BitAccess"
                     : !f11.storageBuffer16BitAccess   ? "storageBuffer16BitAccess"
                     : !f12.shaderInt8                 ? "shaderInt8"
                     : !f2.features.shaderInt16        ? "shaderInt16"
                     : lim->maxComputeSharedMemorySize < 16384 ? "16 KiB of shared memory"
                     : NULL;
  if (miss) {
    snprintf(why, why_len, "%s lacks %s", name, miss);
    return AG_ERR_UNAVAILABLE;
  }
  /* The shaders' work-groups: 256 x 1 x 1 (the 1-D and row kernels), 16 x
   * 16 (GEMM), 16 (attention). Vulkan guarantees only 128 x 128 x 64 and
   * 128 invocations. */
  if (lim->maxComputeWorkGroupSize[0] < VKB_WG || lim->maxComputeWorkGroupSize[1] < 16 ||
      lim->maxComputeWorkGroupInvocations < VKB_WG) {
    snprintf(why, why_len,
             "%s lacks work-groups of %d invocations (maxComputeWorkGroupSize[0] is %u, [1] is %u, "
             "maxComputeWorkGroupInvocations %u)",
             name, VKB_WG, lim->maxComputeWorkGroupSize[0], lim->maxComputeWorkGroupSize[1],
             lim->maxComputeWorkGroupInvocations);
    return AG_ERR_UNAVAILABLE;
  }
  d->f64 = f2.features.shaderFloat64;
  uint32_t nq = 0;
  vkb_f.vkGetPhysicalDeviceQueueFamilyProperties(p, &nq, NULL);
  VkQueueFamilyProperties qf[16];
  if (nq > 16) nq = 16;
  vkb_f.vkGetPhysicalDeviceQueueFamilyProperties(p, &nq, qf);
  d->qfamily = UINT32_MAX;
  /* a compute queue, preferring one without graphics (async compute) */
  for (uint32_t i = 0; i < nq; i++)
    if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) &&
        (d->qfamily == UINT32_MAX || !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)))
      d->qfamily = i;
  if (d->qfamily == UINT32_MAX) {
    snprintf(why, why_len, "%s has no compute queue", name);
    return AG_ERR_UNAVAILABLE;
  }
  d->timestamps = qf[d->qfamily].timestampValidBits > 0 && d->props.limits.timestampPeriod > 0;
  d->ts_period_ns = d->props.limits.timestampPeriod;
  d->ts_mask = qf[d->qfamily].timestampValidBits >= 64 ? ~0ull : ((1ull << qf[d->qfamily].timestampValidBits) - 1);
  vkb_f.vkGetPhysicalDeviceMemoryProperties(p, &d->mem);
  d->mt_device = pick_type(&d->mem, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT);
  if (d->mt_device == UINT32_MAX) d->mt_device = 0;
  VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  d->mt_host = pick_type(&d->mem, hv | VK_MEMORY_PROPERTY_HOST_CACHED_BIT, 0);
  if (d->mt_host == UINT32_MAX) d->mt_host = pick_type(&d->mem, hv, 0);
  if (d->mt_host == UINT32_MAX) {
    snprintf(why, why_len, "%s has no host-visible coherent memory", name);
    return AG_ERR_UNAVAILABLE;
  }
  VkMemoryPropertyFlags df = d->mem.memoryTypes[d->mt_device].propertyFlags;
  d->device_mapped = (df & hv) == hv;
  uint32_t heap = d->mem.memoryTypes[d->mt_device].heapIndex;
  d->total_mem = (size_t)d->mem.memoryHeaps[heap].size;
  /* Vulkan 1.2 here: float controls and maintenance3 are core; maxBufferSize
   * comes with maintenance4 (core in 1.3) */
  bool m4ok = d->props.apiVersion >= VK_API_VERSION_1_3 || dev_has_ext(p, "VK_KHR_maintenance4");
  VkPhysicalDeviceMaintenance4Properties m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
  VkPhysicalDeviceFloatControlsProperties fc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES,
                                                .pNext = m4ok ? &m4 : NULL};
  VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                               .pNext = &fc};
  VkPhysicalDeviceProperties2 p3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
  vkb_f.vkGetPhysicalDeviceProperties2(p, &p3);
  d->max_alloc = (size_t)m3.maxMemoryAllocationSize;
  if (!d->max_alloc || d->max_alloc > d->total_mem) d->max_alloc = d->total_mem;
  d->max_buffer = m4ok && m4.maxBufferSize && m4.maxBufferSize < SIZE_MAX ? (size_t)m4.maxBufferSize : SIZE_MAX;
  if (g_test.max_buffer_size && g_test.max_buffer_size < d->max_buffer) d->max_buffer = (size_t)g_test.max_buffer_size;
  d->szinp32 = fc.shaderSignedZeroInfNanPreserveFloat32 && !g_test.no_float_controls;
  d->szinp64 = fc.shaderSignedZeroInfNanPreserveFloat64 && !g_test.no_float_controls;
  d->denorm32 = fc.shaderDenormPreserveFloat32 && !g_test.no_float_controls;
  d->atom = lim->nonCoherentAtomSize ? lim->nonCoherentAtomSize : 1;
  d->test_noncoherent = g_test.noncoherent;
  d->budget = dev_has_ext(p, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  d->dev_type = (int)d->props.deviceType;
  d->fast_f64 = d->f64 && d->dev_type == VK_PHYSICAL_DEVICE_TYPE_CPU && !g_test.slow_f64;
  /* gemm_tiled.comp's tile, where its shared memory fits (gemm.comp
   * otherwise) */
  d->gemm_cfg = g_test.gemm_generic ? 0 : g_test.gemm_tile ? (int)g_test.gemm_tile : VKB_GEMM_CFG;
  if (d->gemm_cfg && vkb_gemm_shared_bytes(d->gemm_cfg) > lim->maxComputeSharedMemorySize) d->gemm_cfg = 0;
  /* Argument blocks: a discrete GPU would read them from system memory
   * across PCIe on every dispatch; there they go to device-local memory,
   * mapped where a DEVICE_LOCAL | HOST_VISIBLE type has a heap of 64 MiB or
   * more (ReBAR, or the 256 MiB BAR window: the streams use a few hundred
   * KiB), else copied there from a staging buffer once per batch. */
  d->args_mode = VKB_ARGS_ARENA;
  d->mt_args = d->mt_device;
  if (d->dev_type == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU || g_test.device_local_args || g_test.mapped_args) {
    uint32_t bar = pick_type(&d->mem, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT,
                             VK_MEMORY_PROPERTY_LAZILY_ALLOCATED_BIT);
    bool big = bar != UINT32_MAX && d->mem.memoryHeaps[d->mem.memoryTypes[bar].heapIndex].size >= ((uint64_t)64 << 20);
    if (big && !g_test.device_local_args) {
      d->args_mode = VKB_ARGS_MAPPED;
      d->mt_args = bar;
    } else {
      d->args_mode = VKB_ARGS_STAGED;
    }
  }

  pthread_mutex_init(&d->qlock, NULL);
  pthread_mutex_init(&d->plock, NULL);
  pthread_mutex_init(&d->slock, NULL);
  g_count++;
  return AG_OK;
}

/* Creates the logical device, its queue and the pipeline layout; called
 * with g_init_lock held. */
static ag_status open_device(vkb_device *d, char *why, size_t why_len) {
  const char *name = d->props.deviceName;
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                 .queueFamilyIndex = d->qfamily,
                                 .queueCount = 1,
                                 .pQueuePriorities = &prio};
  VkPhysicalDeviceVulkan12Features e12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                          .bufferDeviceAddress = VK_TRUE,
                                          .timelineSemaphore = VK_TRUE,
                                          .storageBuffer8BitAccess = VK_TRUE,
                                          .shaderInt8 = VK_TRUE};
  VkPhysicalDeviceVulkan11Features e11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                          .pNext = &e12,
                                          .storageBuffer16BitAccess = VK_TRUE};
  VkPhysicalDeviceFeatures2 ef = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &e11};
  ef.features.shaderInt64 = VK_TRUE;
  ef.features.shaderInt16 = VK_TRUE;
  ef.features.shaderFloat64 = d->f64 ? VK_TRUE : VK_FALSE;
  const char *dext[1] = {VK_EXT_MEMORY_BUDGET_EXTENSION_NAME};
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                            .pNext = &ef,
                            .queueCreateInfoCount = 1,
                            .pQueueCreateInfos = &qci,
                            .enabledExtensionCount = d->budget ? 1u : 0u,
                            .ppEnabledExtensionNames = dext};
  VkResult r = vkb_f.vkCreateDevice(d->phys, &dci, NULL, &d->dev);
  if (r != VK_SUCCESS) {
    snprintf(why, why_len, "%.100s: vkCreateDevice failed (%s)", name,
             vk_result_name(r) ? vk_result_name(r) : "unknown VkResult");
    return AG_ERR_UNAVAILABLE;
  }
#define VKB_LOAD_D(fn) d->f.fn = (PFN_##fn)vkb_f.vkGetDeviceProcAddr(d->dev, #fn);
  VKB_DEVICE_FNS(VKB_LOAD_D)
#undef VKB_LOAD_D
  d->f.vkGetDeviceQueue(d->dev, d->qfamily, 0, &d->queue);
  VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = 8};
  VkPipelineLayoutCreateInfo lci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                    .pushConstantRangeCount = 1,
                                    .pPushConstantRanges = &pcr};
  r = d->f.vkCreatePipelineLayout(d->dev, &lci, NULL, &d->layout);
  if (r != VK_SUCCESS) {
    d->f.vkDestroyDevice(d->dev, NULL);
    d->dev = VK_NULL_HANDLE;
    snprintf(why, why_len, "%.100s: vkCreatePipelineLayout failed", name);
    return AG_ERR_UNAVAILABLE;
  }
  return AG_OK;
}

static ag_status vk_init(int *out_count, char *reason, size_t reason_len) {
  pthread_mutex_lock(&g_init_lock);
  if (!g_inited) {
    g_inited = true;
    g_init_status = AG_ERR_UNAVAILABLE;
    char why[384] = "";
    /* AG_VULKAN_LIBRARY names another loader (tests point it at a missing
     * file to check the absent-loader path). */
    const char *libname = getenv("AG_VULKAN_LIBRARY");
    if (!libname || !*libname) libname = "libvulkan.so.1";
    g_lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) {
      const char *e = dlerror();
      char shown[64];
      snprintf(g_init_reason, sizeof g_init_reason, "libanygrad-vulkan.so: cannot load the Vulkan loader %s%s (%s)",
               ag_escape(libname, shown, sizeof shown), getenv("AG_VULKAN_LIBRARY") ? " (AG_VULKAN_LIBRARY)" : "",
               e ? e : "not found");
    } else if (!(vkb_f.vkGetInstanceProcAddr = (PFN_vkGetInstanceProcAddr)dlsym(g_lib, "vkGetInstanceProcAddr"))) {
      snprintf(g_init_reason, sizeof g_init_reason, "libanygrad-vulkan.so: %s has no vkGetInstanceProcAddr", libname);
    } else {
#define VKB_LOAD_G(fn) vkb_f.fn = (PFN_##fn)vkb_f.vkGetInstanceProcAddr(NULL, #fn);
      VKB_GLOBAL_FNS(VKB_LOAD_G)
#undef VKB_LOAD_G
      if (!parse_test_switch(why, sizeof why) || create_instance(why, sizeof why) != AG_OK) {
        snprintf(g_init_reason, sizeof g_init_reason, "libanygrad-vulkan.so: %s", why);
      } else {
        uint32_t np = 0;
        VkPhysicalDevice phys[AG_MAX_DEVICES];
        vkb_f.vkEnumeratePhysicalDevices(g_instance, &np, NULL);
        if (np > AG_MAX_DEVICES) np = AG_MAX_DEVICES;
        if (np) vkb_f.vkEnumeratePhysicalDevices(g_instance, &np, phys);
        char skipped[256] = "";
        for (uint32_t i = 0; i < np; i++) {
          char w[160] = "";
          if (add_device(phys[i], w, sizeof w) != AG_OK && !skipped[0]) snprintf(skipped, sizeof skipped, "%s", w);
        }
        if (g_count) g_init_status = AG_OK;
        else if (np == 0)
          snprintf(g_init_reason, sizeof g_init_reason,
                   "libanygrad-vulkan.so: no Vulkan device (no driver: mesa-vulkan-drivers gives lavapipe)");
        else
          snprintf(g_init_reason, sizeof g_init_reason, "libanygrad-vulkan.so: no usable Vulkan device (%s)", skipped);
      }
    }
  }
  ag_status st = g_init_status;
  *out_count = g_count;
  if (st != AG_OK && reason && reason_len) snprintf(reason, reason_len, "%s", g_init_reason);
  pthread_mutex_unlock(&g_init_lock);
  if (st != AG_OK) ag_error_set(st, "%s", g_init_reason);
  return st;
}

static void vk_shutdown(void) {
  pthread_mutex_lock(&g_init_lock);
  for (int i = 0; i < g_count; i++) {
    vkb_device *d = &g_dev[i];
    pthread_mutex_destroy(&d->qlock);
    pthread_mutex_destroy(&d->plock);
    pthread_mutex_destroy(&d->slock);
    if (!d->opened || d->open_status != AG_OK) continue;
    d->f.vkDeviceWaitIdle(d->dev);
    for (int k = 0; k < d->npipes; k++) d->f.vkDestroyPipeline(d->dev, d->pipes[k].pipe, NULL);
    free(d->pipes);
    for (int k = 0; k < VKS_COUNT; k++)
      if (d->mod[k]) d->f.vkDestroyShaderModule(d->dev, d->mod[k], NULL);
    d->f.vkDestroyPipelineLayout(d->dev, d->layout, NULL);
    d->f.vkDestroyDevice(d->dev, NULL);
  }
  g_count = 0;
  if (g_messenger && vkb_f.vkDestroyDebugUtilsMessengerEXT)
    vkb_f.vkDestroyDebugUtilsMessengerEXT(g_instance, g_messenger, NULL);
  g_messenger = VK_NULL_HANDLE;
  if (g_instance) vkb_f.vkDestroyInstance(g_instance, NULL);
  g_instance = VK_NULL_HANDLE;
  g_inited = false;
  pthread_mutex_unlock(&g_init_lock);
}

static ag_status vk_device_props(int dev, ag_device_props *out) {
  vkb_device *d = &g_dev[dev];
  memset(out, 0, sizeof *out);
  /* names longer than the API's fields are cut there */
  if (snprintf(out->name, sizeof out->name, "%s", d->props.deviceName) < 0) out->name[0] = '\0';
  if (snprintf(out->vendor, sizeof out->vendor, "%s (vendor 0x%04x)", d->driver, d->props.vendorID) < 0)
    out->vendor[0] = '\0';
  snprintf(out->arch, sizeof out->arch, "Vulkan %u.%u.%u, subgroup %u%s", VK_API_VERSION_MAJOR(d->props.apiVersion),
           VK_API_VERSION_MINOR(d->props.apiVersion), VK_API_VERSION_PATCH(d->props.apiVersion), d->subgroup_size,
           d->szinp32 ? "" : ", NaN/inf not preserved");
  out->total_memory = d->total_mem;
  out->compute_units = 1;
  out->native_f16 = false; /* half types are storage; math is f32 */
  out->native_bf16 = false;
  out->virtual_memory = false;
  out->unified_memory = d->device_mapped;
  return AG_OK;
}

/* Heap budget and usage where VK_EXT_memory_budget exists; else the heap
 * size, and the caching allocator subtracts what it holds. */
static ag_status vk_meminfo(int dev, size_t *out_free, size_t *out_total) {
  vkb_device *d = &g_dev[dev];
  *out_total = d->total_mem;
  *out_free = d->total_mem;
  if (d->budget) {
    VkPhysicalDeviceMemoryBudgetPropertiesEXT b = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
    VkPhysicalDeviceMemoryProperties2 mp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2, .pNext = &b};
    vkb_f.vkGetPhysicalDeviceMemoryProperties2(d->phys, &mp);
    uint32_t heap = d->mem.memoryTypes[d->mt_device].heapIndex;
    size_t budget = (size_t)b.heapBudget[heap], used = (size_t)b.heapUsage[heap];
    if (budget) *out_free = budget > used ? budget - used : 0;
  }
  return AG_OK;
}

ag_status vkb_mem_alloc(vkb_device *d, size_t bytes, vkb_mem_kind kind, vkb_mem *out) {
  memset(out, 0, sizeof *out);
  if (!bytes) bytes = 16;
  if (bytes > d->max_buffer)
    return ag_error_set(AG_ERR_OOM, "vulkan: a buffer of %zu bytes exceeds the device's maxBufferSize %zu on %s",
                        bytes, d->max_buffer, d->props.deviceName);
  VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                            .size = bytes,
                            .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                            .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
  VkResult r = d->f.vkCreateBuffer(d->dev, &bci, NULL, &out->buf);
  if (r != VK_SUCCESS) return vkb_error(r, "vkCreateBuffer");
  VkMemoryRequirements req;
  d->f.vkGetBufferMemoryRequirements(d->dev, out->buf, &req);
  uint32_t type = kind == VKB_MEM_SEGMENT ? d->mt_device : kind == VKB_MEM_ARGS ? d->mt_args : d->mt_host;
  if (!(req.memoryTypeBits & (1u << type))) {
    /* another type with the same properties that the buffer accepts */
    VkMemoryPropertyFlags want = d->mem.memoryTypes[type].propertyFlags;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++)
      if ((req.memoryTypeBits & (1u << i)) && (d->mem.memoryTypes[i].propertyFlags & want) == want) {
        type = i;
        break;
      }
  }
  VkMemoryAllocateFlagsInfo fl = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                  .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                             .pNext = &fl,
                             .allocationSize = req.size,
                             .memoryTypeIndex = type};
  ag_status st = AG_OK;
  r = d->f.vkAllocateMemory(d->dev, &ai, NULL, &out->mem);
  if (r != VK_SUCCESS) {
    st = vkb_error(r, "vkAllocateMemory");
    goto fail;
  }
  if ((r = d->f.vkBindBufferMemory(d->dev, out->buf, out->mem, 0)) != VK_SUCCESS) {
    st = vkb_error(r, "vkBindBufferMemory");
    goto fail;
  }
  VkMemoryPropertyFlags pf = d->mem.memoryTypes[type].propertyFlags;
  out->alloc_bytes = (size_t)req.size;
  out->coherent = !(pf & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) || (pf & VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  if ((pf & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) &&
      (r = d->f.vkMapMemory(d->dev, out->mem, 0, VK_WHOLE_SIZE, 0, &out->map)) != VK_SUCCESS) {
    out->map = NULL;
    st = vkb_error(r, "vkMapMemory");
    goto fail;
  }
  if (out->map && d->test_noncoherent && kind != VKB_MEM_PINNED) {
    /* the test switch: the host works on a copy that meets the device's
     * memory only in vkb_mem_flush and vkb_mem_invalidate, whole atoms at a
     * time, as a CPU cache that is not coherent would */
    void *copy = malloc(out->alloc_bytes);
    if (!copy) {
      st = ag_error_set(AG_ERR_OOM, "vulkan: host copy of a mapping (AG_VULKAN_TEST=noncoherent)");
      goto fail;
    }
    memcpy(copy, out->map, out->alloc_bytes);
    out->dev_map = out->map;
    out->map = copy;
    out->coherent = false;
  }
  VkBufferDeviceAddressInfo dai = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = out->buf};
  out->addr = d->f.vkGetBufferDeviceAddress(d->dev, &dai);
  out->bytes = bytes;
  return AG_OK;
fail:
  if (out->map) d->f.vkUnmapMemory(d->dev, out->mem);
  if (out->mem) d->f.vkFreeMemory(d->dev, out->mem, NULL);
  d->f.vkDestroyBuffer(d->dev, out->buf, NULL);
  memset(out, 0, sizeof *out);
  return st;
}

void vkb_mem_free(vkb_device *d, vkb_mem *m) {
  if (!m->buf) return;
  if (m->dev_map) free(m->map);
  if (m->map) d->f.vkUnmapMemory(d->dev, m->mem);
  d->f.vkDestroyBuffer(d->dev, m->buf, NULL);
  d->f.vkFreeMemory(d->dev, m->mem, NULL);
  memset(m, 0, sizeof *m);
}

/* [off, off + bytes) widened to whole nonCoherentAtomSize blocks, the last
 * one cut at the end of the allocation (VK_WHOLE_SIZE there): what
 * VkMappedMemoryRange accepts. */
static VkMappedMemoryRange atom_range(const vkb_device *d, const vkb_mem *m, size_t off, size_t bytes,
                                      size_t *out_lo, size_t *out_hi) {
  VkDeviceSize a = d->atom, lo = off / a * a, hi = ((VkDeviceSize)off + bytes + a - 1) / a * a;
  bool to_end = hi >= m->alloc_bytes;
  if (to_end) hi = m->alloc_bytes;
  *out_lo = (size_t)lo;
  *out_hi = (size_t)hi;
  return (VkMappedMemoryRange){.sType = VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE,
                               .memory = m->mem,
                               .offset = lo,
                               .size = to_end ? VK_WHOLE_SIZE : hi - lo};
}

ag_status vkb_mem_flush(vkb_device *d, vkb_mem *m, size_t off, size_t bytes) {
  if (m->coherent || !m->map || !bytes) return AG_OK;
  size_t lo, hi;
  VkMappedMemoryRange r = atom_range(d, m, off, bytes, &lo, &hi);
  if (m->dev_map) memcpy((char *)m->dev_map + lo, (const char *)m->map + lo, hi - lo);
  VkResult vr = d->f.vkFlushMappedMemoryRanges(d->dev, 1, &r);
  return vr == VK_SUCCESS ? AG_OK : vkb_error(vr, "vkFlushMappedMemoryRanges");
}

ag_status vkb_mem_invalidate(vkb_device *d, vkb_mem *m, size_t off, size_t bytes) {
  if (m->coherent || !m->map || !bytes) return AG_OK;
  size_t lo, hi;
  VkMappedMemoryRange r = atom_range(d, m, off, bytes, &lo, &hi);
  VkResult vr = d->f.vkInvalidateMappedMemoryRanges(d->dev, 1, &r);
  if (vr != VK_SUCCESS) return vkb_error(vr, "vkInvalidateMappedMemoryRanges");
  if (m->dev_map) memcpy((char *)m->map + lo, (const char *)m->dev_map + lo, hi - lo);
  return AG_OK;
}

/* Segments are read by shaders through device addresses, which the
 * descriptor limit maxStorageBufferRange (128 MiB on lavapipe) does not
 * bound; the limits are the largest allocation and the largest buffer. */
static ag_status vk_segment_alloc(int dev, size_t bytes, void **out_base) {
  vkb_device *d = vkb_dev_open(dev);
  if (!d) return ag_last_status();
  if (bytes > d->max_alloc)
    return ag_error_set(AG_ERR_OOM,
                        "vulkan: segment of %zu bytes exceeds the device's largest allocation "
                        "(maxMemoryAllocationSize %zu) on %s",
                        bytes, d->max_alloc, d->props.deviceName);
  if (bytes > d->max_buffer)
    return ag_error_set(AG_ERR_OOM,
                        "vulkan: segment of %zu bytes exceeds the device's largest buffer (maxBufferSize %zu) on %s",
                        bytes, d->max_buffer, d->props.deviceName);
  vkb_mem *m = malloc(sizeof *m);
  if (!m) return ag_error_set(AG_ERR_OOM, "vulkan: segment record");
  ag_status st = vkb_mem_alloc(d, bytes, VKB_MEM_SEGMENT, m);
  if (st != AG_OK) {
    free(m);
    return st;
  }
  *out_base = m;
  return AG_OK;
}

/* The core frees segments after synchronizing the device (cached memory),
 * but also straight away (caching off, a failed step): every stream's
 * recorded batch is submitted and the queue drained first, so no command
 * reads a freed buffer. */
static void vk_segment_free(int dev, void *base) {
  if (!base) return;
  vkb_device *d = &g_dev[dev];
  vkb_flush_device(d);
  pthread_mutex_lock(&d->qlock);
  d->f.vkDeviceWaitIdle(d->dev);
  pthread_mutex_unlock(&d->qlock);
  vkb_mem_free(d, (vkb_mem *)base);
  free(base);
}

/* Host-visible coherent memory, kept mapped; copies to and from it are
 * recorded on the stream without staging. */
static ag_status vk_pinned_alloc(int dev, size_t bytes, void **out_ptr) {
  vkb_device *d = vkb_dev_open(dev);
  if (!d) return ag_last_status();
  vkb_mem m;
  ag_status st = vkb_mem_alloc(d, bytes, VKB_MEM_PINNED, &m);
  if (st != AG_OK) return st;
  pthread_mutex_lock(&g_pin_lock);
  if (g_pin_n == g_pin_cap) {
    size_t cap = g_pin_cap ? 2 * g_pin_cap : 16;
    vkb_pinned *t = realloc(g_pin, cap * sizeof *t);
    if (!t) {
      pthread_mutex_unlock(&g_pin_lock);
      vkb_mem_free(d, &m);
      return ag_error_set(AG_ERR_OOM, "vulkan: pinned table");
    }
    g_pin = t;
    g_pin_cap = cap;
  }
  g_pin[g_pin_n++] = (vkb_pinned){m, dev};
  pthread_mutex_unlock(&g_pin_lock);
  *out_ptr = m.map;
  return AG_OK;
}

static void vk_pinned_free(int dev, void *ptr) {
  vkb_mem m = {0};
  pthread_mutex_lock(&g_pin_lock);
  for (size_t i = 0; i < g_pin_n; i++)
    if (g_pin[i].m.map == ptr) {
      m = g_pin[i].m;
      g_pin[i] = g_pin[--g_pin_n];
      break;
    }
  pthread_mutex_unlock(&g_pin_lock);
  if (!m.buf) return;
  vkb_device *d = &g_dev[dev];
  pthread_mutex_lock(&d->qlock);
  d->f.vkDeviceWaitIdle(d->dev);
  pthread_mutex_unlock(&d->qlock);
  vkb_mem_free(d, &m);
}

/* The core frees a pinned block only after the copies that use it
 * completed, so the copied record stays valid for them. */
bool vkb_pinned_find(const void *p, size_t bytes, vkb_mem *out, size_t *out_off) {
  bool found = false;
  const char *c = p;
  pthread_mutex_lock(&g_pin_lock);
  for (size_t i = 0; i < g_pin_n && !found; i++) {
    const char *b = g_pin[i].m.map;
    if (c >= b && c + bytes <= b + g_pin[i].m.bytes) {
      *out = g_pin[i].m;
      *out_off = (size_t)(c - b);
      found = true;
    }
  }
  pthread_mutex_unlock(&g_pin_lock);
  return found;
}

ag_status vkb_pipeline(vkb_device *d, vkb_shader sh, int spec, VkPipeline *out) {
  ag_status st = AG_OK;
  pthread_mutex_lock(&d->plock);
  for (int i = 0; i < d->npipes; i++)
    if (d->pipes[i].shader == (int)sh && d->pipes[i].spec == spec) {
      *out = d->pipes[i].pipe;
      pthread_mutex_unlock(&d->plock);
      return AG_OK;
    }
  VkResult r;
  if (!d->mod[sh]) {
    /* every module declares SignedZeroInfNanPreserve for f32 (and f64 where
     * it has doubles); a device that does not take it gets a copy without */
    const uint32_t *code = vkb_spirv_table[sh].code;
    size_t words = vkb_spirv_table[sh].bytes / 4;
    uint32_t *copy = NULL;
    if (!d->szinp32 || !d->szinp64) {
      copy = malloc((words + 10) * sizeof *copy);
      if (!copy) {
        st = ag_error_set(AG_ERR_OOM, "vulkan: shader module %s", vkb_spirv_table[sh].name);
        goto done;
      }
      words = vkb_spirv_float_modes(code, words, d->szinp32, d->szinp64, copy);
      code = copy;
      if (!words) {
        free(copy);
        st = ag_error_set(AG_ERR_INTERNAL, "vulkan: embedded module %s is not valid SPIR-V", vkb_spirv_table[sh].name);
        goto done;
      }
    }
    if (sh >= VKS_P_PROBE && d->denorm32) {
      /* portable numerics: ask for gradual underflow where the device
       * offers the promise (docs/numerics.md) */
      uint32_t *dp = malloc((words + 6) * sizeof *dp);
      size_t dw = dp ? vkb_spirv_add_mode(code, words, VKB_SPV_CAP_DENORM_PRESERVE, VKB_SPV_MODE_DENORM_PRESERVE, 32, dp) : 0;
      free(copy);
      copy = dp;
      if (!dw) {
        free(copy);
        st = ag_error_set(dp ? AG_ERR_INTERNAL : AG_ERR_OOM, "vulkan: shader module %s (DenormPreserve)",
                          vkb_spirv_table[sh].name);
        goto done;
      }
      code = copy;
      words = dw;
    }
    VkShaderModuleCreateInfo mci = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                    .codeSize = words * 4,
                                    .pCode = code};
    r = d->f.vkCreateShaderModule(d->dev, &mci, NULL, &d->mod[sh]);
    free(copy);
    if (r != VK_SUCCESS) {
      st = vkb_error(r, vkb_spirv_table[sh].name);
      goto done;
    }
  }
  if (d->npipes == d->cap_pipes) {
    int cap = d->cap_pipes ? 2 * d->cap_pipes : 64;
    vkb_pipe *t = realloc(d->pipes, (size_t)cap * sizeof *t);
    if (!t) {
      st = ag_error_set(AG_ERR_OOM, "vulkan: pipeline table");
      goto done;
    }
    d->pipes = t;
    d->cap_pipes = cap;
  }
  VkSpecializationMapEntry me = {.constantID = 0, .offset = 0, .size = sizeof(int32_t)};
  int32_t sv = spec;
  VkSpecializationInfo si = {.mapEntryCount = 1, .pMapEntries = &me, .dataSize = sizeof sv, .pData = &sv};
  VkComputePipelineCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
                                    .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                                              .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                                              .module = d->mod[sh],
                                              .pName = "main",
                                              .pSpecializationInfo = &si},
                                    .layout = d->layout};
  VkPipeline p;
  if ((r = d->f.vkCreateComputePipelines(d->dev, VK_NULL_HANDLE, 1, &ci, NULL, &p)) != VK_SUCCESS) {
    st = vkb_error(r, vkb_spirv_table[sh].name);
    goto done;
  }
  d->pipes[d->npipes++] = (vkb_pipe){(int)sh, spec, p};
  *out = p;
done:
  pthread_mutex_unlock(&d->plock);
  return st;
}

/* A discrete or integrated GPU ranks with OpenCL GPUs (below CUDA and HIP);
 * a CPU implementation (lavapipe) below the cpu backend. */
static int32_t vk_device_priority(int dev) {
  return g_dev[dev].dev_type == VK_PHYSICAL_DEVICE_TYPE_CPU ? -1 : 100;
}

static const ag_backend g_backend = {
    AG_BACKEND_HEADER,
    .name = "vulkan",
    .init = vk_init,
    .shutdown = vk_shutdown,
    .device_props = vk_device_props,
    .mem_info = vk_meminfo,
    .segment_alloc = vk_segment_alloc,
    .segment_free = vk_segment_free,
    .pinned_alloc = vk_pinned_alloc,
    .pinned_free = vk_pinned_free,
    .stream_create = vkb_stream_create,
    .stream_destroy = vkb_stream_destroy,
    .stream_synchronize = vkb_stream_synchronize,
    .stream_query = vkb_stream_query,
    .event_create = vkb_event_create,
    .event_destroy = vkb_event_destroy,
    .event_record = vkb_event_record,
    .stream_wait_event = vkb_stream_wait_event,
    .event_query = vkb_event_query,
    .event_synchronize = vkb_event_synchronize,
    .event_elapsed_ms = vkb_event_elapsed_ms,
    .copy_h2d = vkb_copy_h2d,
    .copy_d2h = vkb_copy_d2h,
    .copy_d2d = vkb_copy_d2d,
    .launch = vkb_launch,
    .supports = vkb_supports,
    .take_kernel_error = vkb_take_kernel_error,
    .flags = 0, /* a segment is a VkBuffer handle, not an address the host can use */
    .dlpack_device = 0, /* the handle is a module record, not a VkBuffer: no DLPack form */
    .priority = 100,
    .device_priority = vk_device_priority,
    .description = "Vulkan compute (GLSL shaders as SPIR-V, buffer device addresses)",
    .portable_check = vkb_portable_check,
    .supports_portable = vkb_supports_portable,
};

__attribute__((visibility("default"))) const ag_backend *ag_backend_module_get(void) { return &g_backend; }
