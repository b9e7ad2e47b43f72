/* Data parallelism across processes: run under mpirun (-np 2, -np 4). Every
 * rank trains the charlm MLP 50 steps as one replica of an MPI group; rank 0
 * then trains the same job on one device on the full batch and compares
 * (tolerance as tests/ddp_test.c: 1e-4 relative on the losses). Exit status
 * 0 on every rank when it matches. argv[1] "balance" shares the batch by
 * measured throughput, with the last rank slowed 2x. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ddp_case.h"
#include "anygrad/anygrad.h"

#define LOSS_RTOL 1e-4

static double rdiff(double a, double b) { return fabs(a - b) / fabs(b); }

int main(int argc, char **argv) {
  bool balance = argc > 1 && !strcmp(argv[1], "balance");
  ag_set_num_threads(1);
  ag_group *g = NULL;
  ag_status st = ag_group_create_mpi(AG_CPU, NULL, &g);
  if (st != AG_OK) {
    fprintf(stderr, "ddp_mpi_test: %s: %s\n", ag_status_name(st), ag_last_error());
    return 1;
  }
  int rank = ag_group_rank(g), size = ag_group_size(g);
  charlm_options o = ddp_small_charlm(NULL);
  o.balance = balance;
  charlm_options ro = o;
  ro.group = g;
  if (balance && rank == size - 1) ro.slowdown = 2.0;
  charlm_result r;
  st = charlm_train(&ro, &r);
  int rc = 0;
  if (st != AG_OK) {
    fprintf(stderr, "ddp_mpi_test: rank %d: %s: %s\n", rank, ag_status_name(st), ag_last_error());
    rc = 1;
  }
  if (rc == 0 && rank == 0) {
    charlm_result ref;
    st = charlm_train(&o, &ref);
    if (st != AG_OK) {
      fprintf(stderr, "ddp_mpi_test: one device: %s\n", ag_last_error());
      rc = 1;
    } else {
      double el = rdiff(r.final_loss, ref.final_loss), es = rdiff(r.smooth_loss, ref.smooth_loss),
             ev = rdiff(r.val_loss, ref.val_loss);
      printf("ddp_mpi_test: %d ranks%s: final loss %.6f vs %.6f (rel %.2e), mean rel %.2e, held-out %.6f vs "
             "%.6f (rel %.2e); rank 0 share %lld of 48, %lld rebalances\n",
             size, balance ? " (balanced, last rank 2x slower)" : "", r.final_loss, ref.final_loss, el, es,
             r.val_loss, ref.val_loss, ev, (long long)r.ddp_rows, (long long)r.ddp.rebalances);
      if (!(el <= LOSS_RTOL && es <= LOSS_RTOL && ev <= LOSS_RTOL)) {
        fprintf(stderr, "ddp_mpi_test: replicas differ from one device beyond %g\n", LOSS_RTOL);
        rc = 1;
      }
      if (r.ddp.launched_in_hooks < 1) {
        fprintf(stderr, "ddp_mpi_test: no bucket was launched from a gradient-ready hook\n");
        rc = 1;
      }
    }
  }
  ag_group_destroy(g);
  return rc;
}
