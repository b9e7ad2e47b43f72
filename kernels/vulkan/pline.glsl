/* A line of a portable row kernel (psum.glsl): a work-group's (lanes of
 * WG invocations) or, with k5 set, one invocation's. */
#ifndef AG_PLINE_GLSL
#define AG_PLINE_GLSL
#define P_SINGLE (pc.a.k[5] != 0)
#define P_LINE() (P_SINGLE ? gid() : group_id())
#define P_LANE (P_SINGLE ? 0l : int64_t(gl_LocalInvocationID.x))
#define P_STEP (P_SINGLE ? 1l : int64_t(WG))
#define P_LEAD (P_SINGLE || gl_LocalInvocationID.x == 0u)
#endif
