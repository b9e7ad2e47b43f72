/* Autocast and grad-mode regions as the ops apply them and scopes unwind
 * them (core/tensor/autocast.c, core/tensor/grad_mode.c). Never installed. */
#ifndef AG_CORE_AUTOCAST_H
#define AG_CORE_AUTOCAST_H

#include <stddef.h>

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

/* Mode regions tied to scopes (ag_scope_begin records the depths, ag_scope_end
 * closes what was opened after them). A region's site is "file:line" when the
 * caller marked it (AG_SYNC_SITES) or the caller's address ("main+0x4c"). */
AG_HIDDEN int ag__autocast_depth(void);
/* Close autocast regions down to depth; returns how many were closed and
 * writes the outermost closed one's description ("autocast(f16) opened at
 * main+0x4c") into what (may be NULL). */
AG_HIDDEN int ag__autocast_unwind(int depth, char *what, size_t len);
AG_HIDDEN int ag__grad_mode_depth(void);
AG_HIDDEN int ag__grad_mode_unwind(int depth, char *what, size_t len);

#endif
