#!/usr/bin/env bash
# Test hosts made of network namespaces, and Open MPI runs across them over
# TCP (docs/distributed.md, "Hosts made of network namespaces").
#
#   netns_hosts.sh run N PROFILE [--] PROGRAM ARGS...
#       create N hosts, run `mpirun -np N PROGRAM ARGS...` with one rank per
#       host over Open MPI's TCP transport, print each host's traffic, tear
#       everything down (also on failure or a signal), exit with mpirun's code.
#   netns_hosts.sh up N PROFILE TAG / down TAG
#       the same hosts kept between commands (benchmarks); `down` removes them.
#   netns_hosts.sh agent HOST COMMAND...
#       Open MPI's launch agent (plm_rsh_agent): called like ssh, it runs the
#       command in HOST's namespace with a UTS namespace of its own. Called
#       from the hub (mpirun, `anygrad launch`), it first checks, like ssh's
#       connect, that HOST answers over the bridge (a TCP connection to it is
#       refused or accepted within 2 s): a host whose link is down fails
#       (exit 255, as ssh does).
#   netns_hosts.sh launch TAG [--] COMMAND...
#       run COMMAND (`anygrad launch ...`) in the hub of the hosts `up` made,
#       with the environment of `mpi` below: Open MPI over TCP only
#       (OMPI_MCA_* variables), AG_NETNS_TAG, and AG_NETNS_AGENT (this
#       script's agent form, for --agent) and AG_NETNS_HOSTS (the hosts'
#       addresses, comma-separated, for --hosts) exported.
#   netns_hosts.sh check
#       exit 0 when hosts can be created here, else 77 with the reason.
#
# Layout (TAG: AG_NETNS_TAG, default the process id): namespace ag<TAG>hub
# holds the bridge and has 10.213.0.1 (where mpirun runs); host i is
# namespace ag<TAG>h<i> with eth0 = 10.213.0.<11+i>/24 and hostname
# ag<TAG>h<i>. Nothing in the root namespace changes: the subnet exists only
# inside these namespaces and the bridge is in its own.
#
# PROFILE (each direction of each host's link; AG_NETNS_PROFILE_* overrides):
#   fast   10 Gbit/s, 50 us one-way latency
#   slow   1 Gbit/s, 200 us one-way latency
#   none   no shaping
#   RATE[,LATENCY[,LOSS]]  e.g. 2gbit,100us,0.1%
# Rate is shaped with tc netem when the kernel has it (sch_netem; then
# latency and loss too), else with tbf (rate only: the latency and loss are
# then not emulated, and the run says so: AG_NETNS_SHAPED in the
# environment of the ranks says which).
set -euo pipefail

SELF=$(readlink -f "$0")
SUBNET=10.213.0
die() { echo "netns_hosts: $*" >&2; exit 1; }
skip() { echo "netns_hosts: SKIP: $*" >&2; exit 77; }

ns_hub() { echo "ag${1}hub"; }
ns_host() { echo "ag${1}h${2}"; }

# Whether namespaces, veths, a bridge and tbf work here (77 and the reason if not).
check() {
  [ "$(id -u)" = 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
  command -v ip >/dev/null || skip "ip (iproute2) not found"
  command -v tc >/dev/null || skip "tc (iproute2) not found"
  command -v unshare >/dev/null || skip "unshare (util-linux) not found"
  command -v mpirun >/dev/null || skip "mpirun (Open MPI) not found"
  local t="agchk$$"
  ip netns add "$t" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
  local ok=1
  ip -n "$t" link add v0 type veth peer name v1 2>/dev/null || ok=0
  [ $ok = 1 ] && { ip -n "$t" link add br0 type bridge 2>/dev/null || ok=0; }
  [ $ok = 1 ] && { tc -n "$t" qdisc add dev v0 root tbf rate 1gbit burst 128k latency 5ms 2>/dev/null || ok=0; }
  ip netns del "$t"
  [ $ok = 1 ] || skip "veth pairs, bridges or the tbf qdisc are unavailable in this kernel"
}

# The qdisc arguments for one direction: "netem ..." or "tbf ...".
# $1 rate, $2 latency (or ""), $3 loss (or ""), $4 with latency (1) or not.
shaper() {
  local rate=$1 lat=$2 loss=$3 with_lat=$4
  if [ "$HAVE_NETEM" = 1 ]; then
    local a="netem limit 100000"
    [ "$with_lat" = 1 ] && [ -n "$lat" ] && a="$a delay $lat"
    [ "$with_lat" = 1 ] && [ -n "$loss" ] && a="$a loss $loss"
    echo "$a rate $rate"
  else
    # burst: at least 4 ms of the rate (timer granularity), at least 256 KiB
    local bps
    bps=$(rate_bps "$rate")
    local burst=$((bps / 8 / 250))
    [ $burst -lt 262144 ] && burst=262144
    echo "tbf rate $rate burst $burst latency 20ms"
  fi
}

rate_bps() {
  local r=${1,,}
  case $r in
    *gbit) echo $(( ${r%gbit} * 1000000000 )) ;;
    *mbit) echo $(( ${r%mbit} * 1000000 )) ;;
    *kbit) echo $(( ${r%kbit} * 1000 )) ;;
    *) die "rate '$1': use Ngbit, Nmbit or Nkbit" ;;
  esac
}

profile() { # sets RATE LAT LOSS
  case $1 in
    fast) RATE=${AG_NETNS_PROFILE_FAST_RATE:-10gbit} LAT=50us LOSS= ;;
    slow) RATE=${AG_NETNS_PROFILE_SLOW_RATE:-1gbit} LAT=200us LOSS= ;;
    none) RATE= LAT= LOSS= ;;
    *) IFS=, read -r RATE LAT LOSS <<<"$1"; rate_bps "$RATE" >/dev/null ;;
  esac
}

up() { # N PROFILE TAG
  local n=$1 tag=$3
  [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] || die "N must be 1..64, got '$n'"
  profile "$2"
  HAVE_NETEM=0
  local hub
  hub=$(ns_hub "$tag")
  ip netns add "$hub"
  ip -n "$hub" link set lo up
  ip -n "$hub" link add br0 type bridge
  ip -n "$hub" addr add "$SUBNET.1/24" dev br0
  ip -n "$hub" link set br0 up
  if [ -n "$RATE" ] && tc -n "$hub" qdisc add dev lo root netem delay 1us 2>/dev/null; then
    tc -n "$hub" qdisc del dev lo root
    HAVE_NETEM=1
  fi
  for ((i = 0; i < n; i++)); do
    local h
    h=$(ns_host "$tag" $i)
    ip netns add "$h"
    ip -n "$hub" link add "h$i" type veth peer name eth0 netns "$h"
    ip -n "$hub" link set "h$i" master br0 up
    ip -n "$h" link set lo up
    ip -n "$h" addr add "$SUBNET.$((11 + i))/24" dev eth0
    ip -n "$h" link set eth0 up
    if [ -n "$RATE" ]; then
      # host -> bridge: rate, one-way latency, loss; bridge -> host: rate
      # shellcheck disable=SC2046
      tc -n "$h" qdisc add dev eth0 root $(shaper "$RATE" "$LAT" "$LOSS" 1)
      # shellcheck disable=SC2046
      tc -n "$hub" qdisc add dev "h$i" root $(shaper "$RATE" "$LAT" "$LOSS" 0)
    fi
  done
  local shaped="none"
  if [ -n "$RATE" ]; then
    if [ "$HAVE_NETEM" = 1 ]; then shaped="netem rate $RATE${LAT:+ delay $LAT}${LOSS:+ loss $LOSS}"
    else shaped="tbf rate $RATE (latency ${LAT:-0} and loss ${LOSS:-0} not emulated: no sch_netem in this kernel)"; fi
  fi
  echo "$shaped" >"/run/ag${tag}.shaped"
  # every port of the bridge forwards before anything starts
  for _ in $(seq 100); do
    [ "$(bridge -n "$hub" link show | grep -c 'state forwarding')" = "$n" ] && return 0
    sleep 0.05
  done
  die "the bridge ports of $hub do not reach the forwarding state"
}

down() { # TAG: end what still runs in the tag's namespaces, remove them (the veths and bridge go with them)
  local tag=$1
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^ag${tag}(hub|h[0-9]+)$" || true); do
    # shellcheck disable=SC2046
    kill -9 $(ip netns pids "$ns" 2>/dev/null) 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -f "/run/ag${tag}.shaped"
}

# Launch agent: HOST is 10.213.0.<11+i>; AG_NETNS_TAG names the set. Like
# ssh, the remaining arguments form one shell command.
agent() {
  local host=$1; shift
  local tag=${AG_NETNS_TAG:?AG_NETNS_TAG not set (the agent runs under netns_hosts.sh)}
  [[ $host =~ ^$SUBNET\.([0-9]+)$ ]] || die "agent: unknown host '$host'"
  local i=$((BASH_REMATCH[1] - 11)) ns
  ns=$(ns_host "$tag" $i)
  if [ "$(ip netns identify $$ 2>/dev/null)" = "$(ns_hub "$tag")" ]; then
    local err
    # shellcheck disable=SC2016
    err=$(timeout 2 bash -c 'exec 3<>"/dev/tcp/$0/1"' "$host" 2>&1) || [[ $err == *refused* ]] || {
      echo "netns_hosts agent: $host does not answer (its link is down?)" >&2
      exit 255
    }
  fi
  exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$ns" "$*"
}

# Traffic of each host's eth0 (bytes sent and received).
traffic() { # TAG N
  for ((i = 0; i < $2; i++)); do
    local h
    h=$(ns_host "$1" $i)
    printf 'host %d (%s.%d): tx %s rx %s bytes\n' $i $SUBNET $((11 + i)) \
      "$(ip netns exec "$h" cat /sys/class/net/eth0/statistics/tx_bytes)" \
      "$(ip netns exec "$h" cat /sys/class/net/eth0/statistics/rx_bytes)"
  done
}

# mpirun in the hub, one rank per host, TCP only (no shared memory, no UCX).
mpi() { # TAG N PROGRAM ARGS...
  local tag=$1 n=$2; shift 2
  local hf="/run/ag${tag}.hosts"
  : >"$hf"
  for ((i = 0; i < n; i++)); do echo "$SUBNET.$((11 + i)) slots=1" >>"$hf"; done
  local rc=0
  AG_NETNS_TAG=$tag AG_NETNS_SHAPED="$(cat "/run/ag${tag}.shaped")" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    ip netns exec "$(ns_hub "$tag")" mpirun -np "$n" --hostfile "$hf" --map-by node --oversubscribe \
    --mca plm_rsh_agent "$SELF agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$SUBNET.0/24" \
    --mca oob_tcp_if_include "$SUBNET.0/24" -x AG_NETNS_SHAPED "$@" || rc=$?
  rm -f "$hf"
  return $rc
}

# COMMAND in the hub with mpi's transport settings as OMPI_MCA_* variables.
launch() { # TAG COMMAND...
  local tag=$1; shift
  [ "${1:-}" = "--" ] && shift
  [ $# -ge 1 ] || die "usage: launch TAG [--] COMMAND..."
  local hub n hosts=""
  hub=$(ns_hub "$tag")
  ip netns pids "$hub" >/dev/null 2>&1 || die "launch: no hosts of tag '$tag' (run 'up' first)"
  n=$(ip netns list | awk '{print $1}' | grep -cE "^ag${tag}h[0-9]+$" || true)
  for ((i = 0; i < n; i++)); do hosts="$hosts${hosts:+,}$SUBNET.$((11 + i))"; done
  AG_NETNS_TAG=$tag AG_NETNS_SHAPED="$(cat "/run/ag${tag}.shaped")" AG_NETNS_AGENT="$SELF agent" \
    AG_NETNS_HOSTS=$hosts OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    OMPI_MCA_plm_rsh_no_tree_spawn=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self \
    OMPI_MCA_btl_tcp_if_include="$SUBNET.0/24" OMPI_MCA_oob_tcp_if_include="$SUBNET.0/24" \
    exec ip netns exec "$hub" "$@"
}

cmd=${1:-}
[ -n "$cmd" ] || die "usage: netns_hosts.sh run N PROFILE [--] PROGRAM ARGS... | up N PROFILE TAG | down TAG | mpi TAG N PROGRAM ARGS... | launch TAG [--] COMMAND... | agent HOST CMD... | check"
shift
case $cmd in
  check) check ;;
  agent) agent "$@" ;;
  up) [ $# = 3 ] || die "usage: up N PROFILE TAG"; check; up "$@" ;;
  down) [ $# = 1 ] || die "usage: down TAG"; down "$1" ;;
  traffic) traffic "$@" ;;
  mpi) mpi "$@" ;;
  launch) [ $# -ge 2 ] || die "usage: launch TAG [--] COMMAND..."; launch "$@" ;;
  run)
    [ $# -ge 3 ] || die "usage: run N PROFILE [--] PROGRAM ARGS..."
    n=$1 prof=$2; shift 2
    [ "${1:-}" = "--" ] && shift
    check
    tag=${AG_NETNS_TAG:-$$}
    trap 'down "$tag"' EXIT
    trap 'exit 130' INT TERM
    up "$n" "$prof" "$tag"
    echo "netns_hosts: $n hosts ag${tag}h0..$((n - 1)) ($SUBNET.11-$((10 + n))), link: $(cat "/run/ag${tag}.shaped")"
    rc=0
    mpi "$tag" "$n" "$@" || rc=$?
    traffic "$tag" "$n"
    exit $rc
    ;;
  *) die "unknown command '$cmd'" ;;
esac
