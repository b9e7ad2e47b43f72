/* The local rank a launcher gives a process (ag_dist_local_rank): which of
 * the host's devices a rank takes when it is told only the kind. Read from
 * the environment, so it is known before any communication library starts
 * and does not depend on one. */
#include <stdio.h>
#include <stdlib.h>

#include "anygrad/checks.h"
#include "anygrad/dist.h"

/* The launchers' names for it, in the order they are looked at: the MPI
 * launchers' first, since srun and torchrun variables may be inherited from
 * an outer job step. */
static const char *const k_local_rank_vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                                "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"};
#define N_VARS (sizeof k_local_rank_vars / sizeof *k_local_rank_vars)

ag_status ag_dist_local_rank(int *out_local_rank, const char **out_source) {
  if (out_source) *out_source = NULL;
  if (!out_local_rank) return ag_error_set(AG_ERR_INVALID, "ag_dist_local_rank: NULL out_local_rank");
  for (size_t i = 0; i < N_VARS; i++) {
    const char *v = getenv(k_local_rank_vars[i]);
    if (!v || !*v) continue;
    int64_t r = 0;
    ag_status st = ag_env_i64(k_local_rank_vars[i], 0, 1048575, 0, &r);
    if (st != AG_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", ag_last_error());
      return ag_error_set(st, "ag_dist_local_rank: %s (the launcher's local rank)", msg);
    }
    *out_local_rank = (int)r;
    if (out_source) *out_source = k_local_rank_vars[i];
    return AG_OK;
  }
  return ag_error_set(AG_ERR_UNAVAILABLE,
                      "ag_dist_local_rank: no launcher set a local rank (none of OMPI_COMM_WORLD_LOCAL_RANK, "
                      "MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID, LOCAL_RANK is set)");
}
