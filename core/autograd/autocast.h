/* Autocast as the ops apply it (core/autograd/amp.c). Never installed. */
#ifndef AG_CORE_AUTOCAST_H
#define AG_CORE_AUTOCAST_H

#include "anygrad/tensor.h"

#include "hidden.h"

/* New reference to t in dtype dt (a view when it already is; non-float
 * tensors pass unchanged); parameter casts are cached per region. */
AG_HIDDEN ag_tensor *ag__autocast_to(ag_tensor *t, ag_dtype dt);
/* Widest float dtype among ts (NULLs and non-floats skipped), or -1. */
AG_HIDDEN ag_dtype ag__autocast_widest(int n, ag_tensor *const *ts);
/* While suspended, ag_autocast_enabled() is false (ops doing their own casts). */
AG_HIDDEN void ag__autocast_suspend(void);
AG_HIDDEN void ag__autocast_resume(void);

#endif
