# Embeds SPIR-V modules into a C source defining vkb_spirv_table (in the
# given order, which is vkb_shader's). Run at build time:
#   cmake -DOUT=.. -DSPVS=a.spv|b.spv -DNAMES=a|b -P spirv_embed.cmake
string(REPLACE "|" ";" SPVS "${SPVS}")
string(REPLACE "|" ";" NAMES "${NAMES}")
set(_body "/* Generated from kernels/vulkan by spirv_embed.cmake; do not edit. */\n#include \"vk_internal.h\"\n")
set(_table "")
set(_i 0)
foreach(_f ${SPVS})
  list(GET NAMES ${_i} _name)
  file(READ ${_f} _h HEX)
  string(LENGTH "${_h}" _len)
  math(EXPR _n "${_len} / 2")
  # little-endian 32-bit words
  string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])" "0x\\4\\3\\2\\1u," _w "${_h}")
  string(REGEX REPLACE "((0x........u,){8})" "\\1\n" _w "${_w}")
  string(APPEND _body "static const uint32_t spv_${_name}[] = {\n${_w}};\n")
  string(APPEND _table "  {\"${_name}\", spv_${_name}, ${_n}},\n")
  math(EXPR _i "${_i} + 1")
endforeach()
string(APPEND _body "const vkb_spirv vkb_spirv_table[VKS_COUNT] = {\n${_table}};\n")
file(WRITE ${OUT}.tmp "${_body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
