/* The portable f32 math library compiled as GLSL (glslc) and run on the
 * Vulkan device (lavapipe here): every function of include/anygrad/pmath.h
 * on the same inputs as this C program, with every float operation
 * NoContraction and division and square root built from + - * and int
 * arithmetic, must give the same bits (NaN: any NaN). Skips (77) without a
 * Vulkan device.
 *   pmath_vulkan_test <pmath_vk.spv> [n]   n inputs per function (10^6) */
#include <stdlib.h>
#include <vulkan/vulkan.h>

#include "pmath_cross.h"

#define VK(e, what)                                         \
  do {                                                      \
    VkResult r_ = (e);                                      \
    if (r_ != VK_SUCCESS) {                                 \
      fprintf(stderr, "%s failed: %d\n", what, (int)r_);    \
      return 1;                                             \
    }                                                       \
  } while (0)

static uint32_t *read_spv(const char *path, size_t *out_bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint32_t *code = len > 0 ? malloc((size_t)len) : NULL;
  if (code && fread(code, 1, (size_t)len, f) != (size_t)len) {
    free(code);
    code = NULL;
  }
  fclose(f);
  *out_bytes = (size_t)len;
  return code;
}

typedef struct buf {
  VkBuffer b;
  VkDeviceMemory m;
  float *p;
} buf;

static int make_buf(VkPhysicalDevice pd, VkDevice dev, VkDeviceSize bytes, buf *o) {
  VkBufferCreateInfo bi = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = bytes;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  VK(vkCreateBuffer(dev, &bi, NULL, &o->b), "vkCreateBuffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(dev, o->b, &req);
  VkPhysicalDeviceMemoryProperties mp;
  vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t type = UINT32_MAX;
  for (uint32_t t = 0; t < mp.memoryTypeCount && type == UINT32_MAX; t++)
    if ((req.memoryTypeBits & (1u << t)) && (mp.memoryTypes[t].propertyFlags & want) == want) type = t;
  if (type == UINT32_MAX) return 1;
  VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = type;
  VK(vkAllocateMemory(dev, &ai, NULL, &o->m), "vkAllocateMemory");
  VK(vkBindBufferMemory(dev, o->b, o->m, 0), "vkBindBufferMemory");
  void *p;
  VK(vkMapMemory(dev, o->m, 0, bytes, 0, &p), "vkMapMemory");
  o->p = p;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: pmath_vulkan_test <pmath_vk.spv> [n]\n");
    return 2;
  }
  int64_t n = argc > 2 ? atoll(argv[2]) : 1000000;
  VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ici.pApplicationInfo = &app;
  VkInstance inst;
  if (vkCreateInstance(&ici, NULL, &inst) != VK_SUCCESS) {
    printf("skipped: no Vulkan instance\n");
    return 77;
  }
  uint32_t npd = 8;
  VkPhysicalDevice pds[8];
  if (vkEnumeratePhysicalDevices(inst, &npd, pds) < 0 || npd == 0) {
    printf("skipped: no Vulkan device\n");
    vkDestroyInstance(inst, NULL);
    return 77;
  }
  VkPhysicalDevice pd = pds[0];
  uint32_t qf = UINT32_MAX, nq = 16;
  VkQueueFamilyProperties qp[16];
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qp);
  for (uint32_t i = 0; i < nq && qf == UINT32_MAX; i++)
    if (qp[i].queueFlags & VK_QUEUE_COMPUTE_BIT) qf = i;
  if (qf == UINT32_MAX) {
    printf("skipped: no compute queue\n");
    return 77;
  }
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(pd, &props);
  float prio = 1.0f;
  VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = qf;
  qci.queueCount = 1;
  qci.pQueuePriorities = &prio;
  VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  VkDevice dev;
  VK(vkCreateDevice(pd, &dci, NULL, &dev), "vkCreateDevice");
  VkQueue queue;
  vkGetDeviceQueue(dev, qf, 0, &queue);

  size_t spv_bytes = 0;
  uint32_t *spv = read_spv(argv[1], &spv_bytes);
  if (!spv) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  VkShaderModuleCreateInfo smi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  smi.codeSize = spv_bytes;
  smi.pCode = spv;
  VkShaderModule sm;
  VK(vkCreateShaderModule(dev, &smi, NULL, &sm), "vkCreateShaderModule");
  VkDescriptorSetLayoutBinding bind[3];
  for (uint32_t i = 0; i < 3; i++) {
    memset(&bind[i], 0, sizeof bind[i]);
    bind[i].binding = i;
    bind[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bind[i].descriptorCount = 1;
    bind[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dli = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  dli.bindingCount = 3;
  dli.pBindings = bind;
  VkDescriptorSetLayout dsl;
  VK(vkCreateDescriptorSetLayout(dev, &dli, NULL, &dsl), "vkCreateDescriptorSetLayout");
  VkPushConstantRange pcr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
  VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &dsl;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &pcr;
  VkPipelineLayout pl;
  VK(vkCreatePipelineLayout(dev, &pli, NULL, &pl), "vkCreatePipelineLayout");
  VkComputePipelineCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
  cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cpi.stage.module = sm;
  cpi.stage.pName = "main";
  cpi.layout = pl;
  VkPipeline pipe;
  VK(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpi, NULL, &pipe), "vkCreateComputePipelines");

  VkDeviceSize bytes = (VkDeviceSize)n * sizeof(float);
  buf bx, by, bo;
  if (make_buf(pd, dev, bytes, &bx) || make_buf(pd, dev, bytes, &by) || make_buf(pd, dev, bytes, &bo)) {
    fprintf(stderr, "no host-visible memory\n");
    return 1;
  }
  VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3};
  VkDescriptorPoolCreateInfo dpi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  dpi.maxSets = 1;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &ps;
  VkDescriptorPool dp;
  VK(vkCreateDescriptorPool(dev, &dpi, NULL, &dp), "vkCreateDescriptorPool");
  VkDescriptorSetAllocateInfo dsa = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  dsa.descriptorPool = dp;
  dsa.descriptorSetCount = 1;
  dsa.pSetLayouts = &dsl;
  VkDescriptorSet ds;
  VK(vkAllocateDescriptorSets(dev, &dsa, &ds), "vkAllocateDescriptorSets");
  VkDescriptorBufferInfo dbi[3] = {{bx.b, 0, VK_WHOLE_SIZE}, {by.b, 0, VK_WHOLE_SIZE}, {bo.b, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet w[3];
  for (uint32_t i = 0; i < 3; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    w[i].dstSet = ds;
    w[i].dstBinding = i;
    w[i].descriptorCount = 1;
    w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    w[i].pBufferInfo = &dbi[i];
  }
  vkUpdateDescriptorSets(dev, 3, w, 0, NULL);
  VkCommandPoolCreateInfo cpci = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  cpci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  cpci.queueFamilyIndex = qf;
  VkCommandPool cp;
  VK(vkCreateCommandPool(dev, &cpci, NULL, &cp), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo cbai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  cbai.commandPool = cp;
  cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cbai.commandBufferCount = 1;
  VkCommandBuffer cb;
  VK(vkAllocateCommandBuffers(dev, &cbai, &cb), "vkAllocateCommandBuffers");

  printf("device: %s, %lld inputs per function\n", props.deviceName, (long long)n);
  int64_t total_bad = 0;
  for (int f = 0; f < PM_COUNT; f++) {
    pm_inputs(f, bx.p, by.p, n);
    VkCommandBufferBeginInfo cbi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    cbi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    VK(vkBeginCommandBuffer(cb, &cbi), "vkBeginCommandBuffer");
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, NULL);
    int32_t push[2] = {f, (int32_t)n};
    vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof push, push);
    vkCmdDispatch(cb, (uint32_t)((n + 63) / 64), 1, 1);
    VK(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    VK(vkQueueSubmit(queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit");
    VK(vkQueueWaitIdle(queue), "vkQueueWaitIdle");
    total_bad += pm_compare(f, bx.p, by.p, bo.p, n);
  }
  printf("total: %lld mismatches\n", (long long)total_bad);
  vkDestroyCommandPool(dev, cp, NULL);
  vkDestroyDescriptorPool(dev, dp, NULL);
  buf *bs[3] = {&bx, &by, &bo};
  for (int i = 0; i < 3; i++) {
    vkUnmapMemory(dev, bs[i]->m);
    vkDestroyBuffer(dev, bs[i]->b, NULL);
    vkFreeMemory(dev, bs[i]->m, NULL);
  }
  vkDestroyPipeline(dev, pipe, NULL);
  vkDestroyPipelineLayout(dev, pl, NULL);
  vkDestroyDescriptorSetLayout(dev, dsl, NULL);
  vkDestroyShaderModule(dev, sm, NULL);
  vkDestroyDevice(dev, NULL);
  vkDestroyInstance(inst, NULL);
  free(spv);
  return total_bad == 0 ? 0 : 1;
}
