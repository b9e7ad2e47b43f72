# Joins the OpenCL kernel sources (in the given order) into a C source file
# defining clb_kernel_source (or NAME). Run at build time:
# cmake -DOUT=.. -DSOURCES=a|b [-DNAME=..] -P
string(REPLACE "|" ";" SOURCES "${SOURCES}")
if(NOT NAME)
  set(NAME clb_kernel_source)
endif()
set(_hex "")
foreach(_f ${SOURCES})
  file(READ ${_f} _h HEX)
  string(APPEND _hex "${_h}0a")
endforeach()
string(LENGTH "${_hex}" _len)
math(EXPR _n "${_len} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" _bytes "${_bytes}")
file(WRITE ${OUT}.tmp
  "/* Generated from the kernels/opencl sources by embed.cmake; do not edit. */\n"
  "#include <stddef.h>\n"
  "__attribute__((visibility(\"hidden\"))) const char ${NAME}[] = {\n${_bytes}0};\n"
  "__attribute__((visibility(\"hidden\"))) const size_t ${NAME}_len = ${_n};\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
