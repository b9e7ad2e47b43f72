/* anygrad: the umbrella header. Include this, link -lanygrad. */
#ifndef ANYGRAD_H
#define ANYGRAD_H

#define ANYGRAD_VERSION_MAJOR 0
#define ANYGRAD_VERSION_MINOR 1
#define ANYGRAD_VERSION_PATCH 0
#define ANYGRAD_VERSION_STRING "0.1.0"

#include "anygrad/status.h"
#include "anygrad/device.h"
#include "anygrad/tensor.h"
#include "anygrad/ops.h"
#include "anygrad/alloc.h"
#include "anygrad/diag.h"
#include "anygrad/amp.h"
#include "anygrad/loader.h"
#include "anygrad/cpu.h"
#include "anygrad/idx.h"
#if __has_include("anygrad/autograd.h")
#include "anygrad/autograd.h"
#endif
#if __has_include("anygrad/nn.h")
#include "anygrad/nn.h"
#endif
#if __has_include("anygrad/optim.h")
#include "anygrad/optim.h"
#endif
#if __has_include("anygrad/serialize.h")
#include "anygrad/serialize.h"
#endif

#endif
