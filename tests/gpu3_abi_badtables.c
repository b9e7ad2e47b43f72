/* The example module (extbackend/minihost.c) under today's ABI version but
 * with op tables whose call layout differs (operands of 16 dimensions):
 * what nothing can bind by name, so the core refuses it, naming the entry. */
#define NAME "badtables"
#define HEADER                                                                                         \
  .struct_size = (uint32_t)sizeof(ag_backend), .abi_major = AG_BACKEND_ABI_MAJOR,                      \
  .abi_minor = AG_BACKEND_ABI_MINOR,                                                                   \
  .tables = "anygrad-tables 1;layout dims=16 operands=6 multi=512;dtype F32 F16 BF16 I32 F64 I64 BOOL U8"
#include "extbackend/minihost.c"
