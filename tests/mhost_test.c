/* Data parallelism across hosts: run by tests/mhost_test.sh under mpirun,
 * one rank per network-namespace host (scripts/netns_hosts.sh), Open MPI
 * over TCP. Every rank trains the charlm GPT and the Fashion-MNIST CNN as
 * one replica of an MPI group; rank 0 then trains the same jobs on one
 * device (the CNN with batch norm over the same row shards, cnn.h) and
 * compares the losses (1e-4 relative, as tests/ddp_mpi_test.c: one device
 * sums each batch in another order than the replicas' partial sums). Rank 0
 * prints the replicas' losses bit for bit ("bits:" line), which the script
 * compares with the same job run in one machine's processes (shared
 * memory): anygrad's reduction order does not depend on the transport.
 * argv[1]: the Fashion-MNIST directory (skipped when absent: "cnn: skip"). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "charlm.h"
#include "cnn.h"
#include "anygrad/anygrad.h"

#define LOSS_RTOL 1e-4

static double rdiff(double a, double b) { return fabs(a - b) / fabs(b); }

static charlm_options gpt_case(void) {
  charlm_options o = charlm_defaults(CHARLM_GPT);
  o.device = AG_CPU;
  o.quiet = true;
  o.samples = 0;
  o.eval_batches = 2;
  o.out = NULL;
  o.steps = 8;
  o.batch = 16;
  o.n_layer = 1;
  o.n_head = 2;
  o.n_embd = 32;
  o.warmup = 2;
  o.log_every = 4;
  o.seed = 11;
  o.seed_set = true;
  o.balance = false;
  o.profile = false;
  o.bucket_bytes = 16 << 10; /* several buckets: launched from the hooks */
  return o;
}

static cnn_options cnn_case(const char *dir) {
  cnn_options o = cnn_defaults();
  o.device = AG_CPU;
  o.data_dir = dir;
  o.quiet = true;
  o.out = NULL;
  o.profile = false;
  o.epochs = 1;
  o.batch = 60; /* 250 images: 4 batches of 60 and one of 10 */
  o.train_limit = 250;
  o.test_limit = 100;
  o.c1 = 4;
  o.c2 = 8;
  o.workers = 0;
  o.warmup = 1;
  o.seed = 3;
  o.seed_set = true;
  o.bucket_bytes = 8 << 10;
  return o;
}

static int fail(int rank, const char *what) {
  fprintf(stderr, "mhost_test: rank %d: %s: %s\n", rank, what, ag_last_error());
  return 1;
}

int main(int argc, char **argv) {
  const char *cnn_dir = argc > 1 ? argv[1] : CNN_DATA_DIR;
  ag_set_num_threads(1);
  ag_group *g = NULL;
  if (ag_group_create_mpi(AG_CPU, NULL, &g) != AG_OK) return fail(-1, "ag_group_create_mpi");
  int rank = ag_group_rank(g), size = ag_group_size(g), rc = 0;
  char host[256] = "";
  gethostname(host, sizeof host);
  printf("mhost_test: rank %d of %d on host %s\n", rank, size, host);
  fflush(stdout);

  charlm_options go = gpt_case(), gro = go;
  gro.group = g;
  charlm_result gr, gref;
  if (charlm_train(&gro, &gr) != AG_OK) rc = fail(rank, "gpt replica");

  char cnn_file[4096];
  snprintf(cnn_file, sizeof cnn_file, "%s/train-images-idx3-ubyte.gz", cnn_dir);
  bool have_cnn = access(cnn_file, R_OK) == 0;
  cnn_options co = cnn_case(cnn_dir), cro = co;
  cro.group = g;
  cnn_result cr, cref;
  memset(&cr, 0, sizeof cr);
  if (rc == 0 && have_cnn && cnn_train(&cro, &cr) != AG_OK) rc = fail(rank, "cnn replica");

  if (rc == 0 && rank == 0) {
    if (charlm_train(&go, &gref) != AG_OK) {
      rc = fail(rank, "gpt on one device");
      goto verdict;
    }
    double e1 = rdiff(gr.final_loss, gref.final_loss), e2 = rdiff(gr.smooth_loss, gref.smooth_loss),
           e3 = rdiff(gr.val_loss, gref.val_loss);
    printf("mhost_test: gpt, %d hosts: final loss %.7f vs one device %.7f (rel %.1e), mean rel %.1e, held-out "
           "%.7f vs %.7f (rel %.1e); %lld of %lld buckets launched from hooks\n",
           size, gr.final_loss, gref.final_loss, e1, e2, gr.val_loss, gref.val_loss, e3,
           (long long)gr.ddp.launched_in_hooks, (long long)(gr.ddp.launched_in_hooks + gr.ddp.launched_at_finish));
    if (!(e1 <= LOSS_RTOL && e2 <= LOSS_RTOL && e3 <= LOSS_RTOL)) {
      fprintf(stderr, "mhost_test: gpt replicas differ from one device beyond %g\n", LOSS_RTOL);
      rc = 1;
    }
    if (gr.ddp.launched_in_hooks < 1) {
      fprintf(stderr, "mhost_test: gpt: no bucket was launched from a gradient-ready hook\n");
      rc = 1;
    }
    if (have_cnn) {
      co.bn_shards = size;
      memset(&cref, 0, sizeof cref);
      if (cnn_train(&co, &cref) != AG_OK) {
        rc = fail(rank, "cnn on one device");
        goto verdict;
      }
      double c1 = rdiff(cr.first_loss, cref.first_loss), c2 = rdiff(cr.last_loss, cref.last_loss);
      printf("mhost_test: cnn, %d hosts, %lld steps: first loss %.7f vs one device %.7f (rel %.1e), last %.7f vs "
             "%.7f (rel %.1e)\n",
             size, (long long)cr.steps, cr.first_loss, cref.first_loss, c1, cr.last_loss, cref.last_loss, c2);
      if (!(c1 <= LOSS_RTOL && c2 <= LOSS_RTOL) || cr.steps != 5 || cref.steps != 5) {
        fprintf(stderr, "mhost_test: cnn replicas differ from one device beyond %g (or not 5 steps)\n", LOSS_RTOL);
        rc = 1;
      }
    } else {
      printf("mhost_test: cnn: skip (no %s)\n", cnn_file);
    }
    printf("mhost_test: bits: %a %a %a %a %a\n", gr.final_loss, gr.smooth_loss, gr.val_loss, cr.first_loss,
           cr.last_loss);
  }
verdict:; /* rank 0's verdict to every rank, so all exit with it */
  int64_t one[1] = {1};
  ag_tensor *v = ag_full(AG_CPU, AG_F32, 1, one, rc);
  if (v && ag_all_reduce(g, v, AG_DIST_MAX, NULL) == AG_OK) rc = ag_item(v) != 0 || rc;
  else rc = 1;
  ag_tensor_release(v);
  ag_group_destroy(g);
  return rc;
}
