/* cuDNN for conv2d, loaded at run time (cuda_dnn.cu); hidden inside the CUDA
 * module. agv_conv (gpu.h) is defined there too. */
#ifndef AG_CUDA_DNN_H
#define AG_CUDA_DNN_H

#include "gpu.h"

/* cuDNN is loaded by the first conv2d (agv_conv), unless AG_GPU_CONV=own;
 * loading never fails (without it the module's own kernels run). */
/* What runs conv2d on device dev: "cuDNN 9.13.0" or "own kernels (<why>)"
 * once the first conv2d loaded it, "own kernels (cuDNN 9.13.0: status
 * 1008)" once cuDNN proved unable to run there (dnn_status.h), "cuDNN if
 * present (...)" before: for device properties and logs. Borrowed, static. */
AGK_HIDDEN const char *agv_dnn_describe(int dev);
/* Destroy s's cuDNN handle (its workspaces are the core's, per launch). */
AGK_HIDDEN void agv_dnn_release(ag_bstream *s);

#endif
