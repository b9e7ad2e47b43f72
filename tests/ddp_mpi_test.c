/* Data parallelism across processes: run under mpirun (-np 2, -np 4). Every
 * rank trains the charlm MLP 50 steps as one replica of an MPI group; rank 0
 * then trains the same job on one device on the full batch and compares
 * (tolerance as tests/ddp_test.c: 1e-4 relative on the losses). Exit status
 * 0 on every rank when it matches. argv[1] "balance" shares the batch by
 * measured throughput, with the last rank slowed 2x; "zero1" / "zero2" shard
 * the optimizer (ZeRO stage 1 / 2): the same tolerance, and each process's
 * optimizer state (its allocator's "optimizer" category) is 1/size of the
 * one device's, within the 16-element padding of each chunk. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_case.h"
#include "anygrad/anygrad.h"

#define LOSS_RTOL 1e-4

static double rdiff(double a, double b) { return fabs(a - b) / fabs(b); }

int main(int argc, char **argv) {
  bool balance = argc > 1 && !strcmp(argv[1], "balance");
  int zero = argc > 1 && !strncmp(argv[1], "zero", 4) ? atoi(argv[1] + 4) : 0;
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
  ro.zero_stage = zero;
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
      double share = (double)r.optimizer_bytes * size / (double)ref.optimizer_bytes;
      printf("ddp_mpi_test: zero stage %d: optimizer bytes on rank 0 %lld, one device %lld (x%d = %.4f of it)\n",
             zero, (long long)r.optimizer_bytes, (long long)ref.optimizer_bytes, size, share);
      if (zero && !(fabs(share - 1) < 0.15)) { /* each state tensor rounds up to 512-byte blocks */
        fprintf(stderr, "ddp_mpi_test: the sharded optimizer holds %.4f/%d of the unsharded state, not 1/%d\n",
                share, size, size);
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
