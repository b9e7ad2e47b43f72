#!/usr/bin/env bash
# mhost_test.sh NETNS_HOSTS N PROFILE MPIEXEC MHOST_TEST [ANYGRAD]: tests/mhost_test.c
# on N hosts made of network namespaces (exit 77, the reason on stderr, when
# they cannot be made here), then checks that every rank ran on its own
# host, that each host's link carried the gradients (its veth's counters),
# and that the losses are bit for bit those of the same job in one
# machine's processes. Then, given ANYGRAD, the command line across hosts:
# `anygrad train --dist mpi` (GPT) prints the losses of one device, and
# `anygrad train --task fashion-mnist --dist mpi` those of the same command
# in one machine's processes.
set -uo pipefail
hosts=$1 n=$2 prof=$3 mpiexec=$4 bin=$5 anygrad=${6:-}
bash "$hosts" check || exit $?
out=$(bash "$hosts" run "$n" "$prof" -- "$bin" 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || { echo "mhost_test.sh: the run across $n hosts failed (exit $rc)"; exit 1; }
names=$(echo "$out" | sed -n 's/^mhost_test: rank [0-9]* of [0-9]* on host \(.*\)$/\1/p' | sort -u | wc -l)
[ "$names" = "$n" ] || { echo "mhost_test.sh: expected $n distinct host names, got $names"; exit 1; }
# A few hundred kB of gradients per host: shared memory would leave the veths idle.
min=200000
hits=0
while read -r tx; do
  [ "$tx" -ge $min ] || { echo "mhost_test.sh: a host sent only $tx bytes on its link (expected >= $min)"; exit 1; }
  hits=$((hits + 1))
done < <(echo "$out" | sed -n 's/^host [0-9]* (.*): tx \([0-9]*\) rx [0-9]* bytes$/\1/p')
[ "$hits" = "$n" ] || { echo "mhost_test.sh: traffic of $hits hosts reported, expected $n"; exit 1; }
bits_net=$(echo "$out" | grep '^mhost_test: bits:')
local_out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$mpiexec" -np "$n" --oversubscribe "$bin" 2>&1)
rc=$?
bits_local=$(echo "$local_out" | grep '^mhost_test: bits:')
[ $rc = 0 ] || { echo "$local_out"; echo "mhost_test.sh: the run in one machine's processes failed"; exit 1; }
echo "across hosts:    $bits_net"
echo "one machine:     $bits_local"
[ -n "$bits_net" ] && [ "$bits_net" = "$bits_local" ] || {
  echo "mhost_test.sh: the losses across hosts differ from the same job in one machine's processes"
  exit 1
}
[ -n "$anygrad" ] || { echo "mhost_test.sh: $n hosts ($prof): passed"; exit 0; }

# ---- the command line ----
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
gpt=(train --model gpt --device cpu --steps 6 --batch 16 --layers 1 --heads 2 --embd 32 --log-every 3 --samples 0
     --profile off --threads 1)
losses() { grep -o 'train loss [0-9.]*' | sort; }
one=$("$anygrad" "${gpt[@]}" --out "$tmp/one.st" 2>&1) || { echo "$one"; echo "mhost_test.sh: gpt on one device failed"; exit 1; }
dist=$(bash "$hosts" run "$n" "$prof" -- "$anygrad" "${gpt[@]}" --dist mpi --balance off --out "$tmp/dist.st" 2>&1) || {
  echo "$dist"; echo "mhost_test.sh: anygrad train --dist mpi across $n hosts failed"; exit 1; }
[ -n "$(echo "$one" | losses)" ] && [ "$(echo "$one" | losses)" = "$(echo "$dist" | losses)" ] || {
  echo "$one"; echo "$dist"; echo "mhost_test.sh: anygrad train --dist mpi (gpt) across hosts prints other losses than one device"
  exit 1; }
echo "anygrad train --dist mpi, gpt, $n hosts: $(echo "$dist" | losses | tr '\n' ' ')= one device"
cnn=(train --task fashion-mnist --device cpu --epochs 1 --batch 50 --train-limit 200 --test-limit 100 --channels 4,8
     --workers 0 --profile off --threads 1 --dist mpi)
epoch() { grep -o 'epoch 1/1: train loss [0-9.]* (sampled), test accuracy [0-9.]*%'; }
if [ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]; then
  c1=$(bash "$hosts" run "$n" "$prof" -- "$anygrad" "${cnn[@]}" --out "$tmp/c1.st" 2>&1) || {
    echo "$c1"; echo "mhost_test.sh: anygrad train --task fashion-mnist --dist mpi across $n hosts failed"; exit 1; }
  c2=$("$mpiexec" -np "$n" --oversubscribe "$anygrad" "${cnn[@]}" --out "$tmp/c2.st" 2>&1) || {
    echo "$c2"; echo "mhost_test.sh: the same in one machine's processes failed"; exit 1; }
  [ -n "$(echo "$c1" | epoch)" ] && [ "$(echo "$c1" | epoch)" = "$(echo "$c2" | epoch)" ] || {
    echo "$c1"; echo "$c2"; echo "mhost_test.sh: the cnn across hosts differs from one machine's processes"; exit 1; }
  cmp -s "$tmp/c1.st" "$tmp/c2.st" || { echo "mhost_test.sh: the cnn checkpoints differ"; exit 1; }
  echo "anygrad train --task fashion-mnist --dist mpi, $n hosts: $(echo "$c1" | epoch), checkpoint identical"
fi
echo "mhost_test.sh: $n hosts ($prof): passed"
