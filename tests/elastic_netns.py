#!/usr/bin/python3
"""`anygrad launch` across hosts made of network namespaces
(scripts/netns_hosts.sh; docs/distributed.md, "Elastic runs"), one case per run:

  elastic_netns.py NETNS_HOSTS ANYGRAD MPIRUN WORKDIR CASE

Three hosts (10.213.0.11-13, no shaping), the launcher in their hub
(`netns_hosts.sh launch`) with the script's agent, Open MPI over TCP only;
the job of tests/elastic_cli.py (charlm MLP, --save-every 20, --balance off).

  down    once rank 1 (host 10.213.0.12) has done step DOWN_AT, that host's
          link goes down (`ip -n HOST link set eth0 down`): its rank neither
          exits nor answers, so --stall-timeout ends the attempt; the probe
          (the agent's 2 s connect check) finds the host gone, and the
          restart runs with the 2 survivors to the end. The final checkpoint
          must equal, byte for byte, a fresh 2-rank run from the checkpoint
          the restart resumed from (mpirun in one machine's processes: the
          same ranks, the same reduction order); the survivors' links must
          have carried the gradients (over 1 MB sent each).
  rejoin  the same, then, once the 2-rank restart has trained, the link
          comes back up and rank 1 of the restart is killed (SIGKILL): the
          next restart runs on all 3 hosts again, and the final checkpoint
          must equal a fresh 3-rank run from that restart's checkpoint.

The hosts are removed at the end, also when the test fails. Exit 77 (skip,
with the reason) when the hosts cannot be made here (not root, no network
namespaces)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from elastic_cli import SAVE_EVERY, STEPS, TRAIN, beat, env, fail  # noqa: E402

DOWN_AT = 60
HOSTS = ["10.213.0.%d" % (11 + i) for i in range(3)]


def wait_for(pred, timeout, proc, what, log):
    t_end = time.time() + timeout
    while time.time() < t_end:
        v = pred()
        if v:
            return v
        if proc.poll() is not None:
            fail("the launcher ended (exit %d) before %s" % (proc.returncode, what), open(log).read())
        time.sleep(0.005)
    fail("%s did not happen within %d s" % (what, timeout), open(log).read())


def reference(mpirun, anygrad, np_, resume, out):
    """A fresh NP-rank run from RESUME in one machine's processes; its checkpoint's bytes."""
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", anygrad, *TRAIN, "--resume", resume, "--out", out]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env(), timeout=120, text=True)
    if p.returncode != 0:
        fail("the reference %d-rank run failed" % np_, p.stdout)
    return open(out, "rb").read()


def link_run(hosts, anygrad, mpirun, work, tag, rejoin=False, down_at=DOWN_AT):
    """One run with the hosts of TAG already up; returns its measurements."""
    ck = os.path.join(work, "ck.safetensors")
    run_dir = os.path.join(work, "run")
    js = os.path.join(work, "launch.json")
    logp = os.path.join(work, "launch.log")
    cmd = ["bash", hosts, "launch", tag, "--", anygrad, "launch", "--hosts", ",".join(HOSTS), "--agent",
           "%s agent" % hosts, "--min-hosts", "2", "--probe-timeout", "5", "--stall-timeout", "3", "--run-dir",
           run_dir, "--json", js, "--", anygrad, *TRAIN, "--out", ck]
    log = open(logp, "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env())
    try:
        hb1 = os.path.join(run_dir, "heartbeat.1")
        b = wait_for(lambda: (lambda b: b if b and b[1] >= down_at else None)(beat(hb1)), 90, p,
                     "rank 1 reached step %d" % down_at, logp)
        t_down = time.time()
        subprocess.run(["ip", "-n", "ag%sh1" % tag, "link", "set", "eth0", "down"], check=True)
        print("# link of host 10.213.0.12 down after rank 1's step %d" % b[1])
        t_kill = None
        if rejoin:
            wait_for(lambda: "attempt 2: training" in open(logp).read(), 90, p, "the 2-rank restart trained", logp)
            # heartbeat.1 is now the restart's rank 1 (10.213.0.13)
            b2 = wait_for(lambda: (lambda b: b if b and b[1] >= down_at + 60 else None)(beat(hb1)), 90, p,
                          "rank 1 of the restart reached step %d" % (down_at + 60), logp)
            subprocess.run(["ip", "-n", "ag%sh1" % tag, "link", "set", "eth0", "up"], check=True)
            os.kill(b2[0], signal.SIGKILL)
            t_kill = time.time()
            print("# link of 10.213.0.12 up again; rank 1 of the restart (pid %d) killed after its step %d" % b2)
        p.wait(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        fail("the launcher still ran after 120 s", open(logp).read())
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        log.close()
    out = open(logp).read()
    d = json.load(open(js)) if os.path.exists(js) else None
    if p.returncode != 0 or not d or d["result"] != "ok":
        fail("the launcher did not finish (exit %d)" % p.returncode, out)
    at = d["attempts"]
    want = [HOSTS, [HOSTS[0], HOSTS[2]]] + ([HOSTS] if rejoin else [])
    if [a["hosts"] for a in at] != want:
        fail("attempts on %s, expected %s" % ([a["hosts"] for a in at], want), out)
    if not at[0]["stalled"] or at[0]["lost"] != [HOSTS[1]] or "no heartbeat for 3.0 s" not in out:
        fail("the first attempt: stalled %s, lost %s" % (at[0]["stalled"], at[0]["lost"]), out)
    if rejoin and (at[1]["rejoined"] != [HOSTS[1]] or at[1]["lost"]):
        fail("the second attempt: rejoined %s, lost %s" % (at[1]["rejoined"], at[1]["lost"]), out)
    r = d["restarts"][0]
    if r["from_step"] <= 0 or r["from_step"] % SAVE_EVERY or not 0 <= r["steps_lost"] <= SAVE_EVERY:
        fail("resumed at step %d with %d steps lost" % (r["from_step"], r["steps_lost"]), out)
    if at[-1]["last_step"] != STEPS or not all(x["training_again"] for x in d["restarts"]):
        fail("the last attempt did not train to step %d" % STEPS, out)
    # the gradients went over the links (TCP between namespaces), not shared memory
    for h in (0, 2):
        tx = int(subprocess.run(["ip", "netns", "exec", "ag%sh%d" % (tag, h), "cat",
                                 "/sys/class/net/eth0/statistics/tx_bytes"], stdout=subprocess.PIPE,
                                text=True).stdout or 0)
        print("# host %s sent %d bytes on its link" % (HOSTS[h], tx))
        if tx < 1000000:
            fail("host %s sent only %d bytes on its link" % (HOSTS[h], tx), out)
    a = open(ck, "rb").read()
    b = reference(mpirun, anygrad, len(at[-1]["hosts"]), at[-1]["resume"], os.path.join(work, "ref.safetensors"))
    if a != b:
        fail("the final checkpoint (%d bytes) differs from a fresh %d-rank run's from %s (%d bytes)" %
             (len(a), len(at[-1]["hosts"]), at[-1]["resume"], len(b)), out)
    m = {"down_to_detected_s": r["detected"] - t_down, "detected_to_restart_s": at[1]["start"] - r["detected"],
         "restart_to_training_s": r["training_again"] - at[1]["start"],
         "down_to_training_s": r["training_again"] - t_down, "steps_lost": r["steps_lost"],
         "from_step": r["from_step"], "last_step": r["last_step"], "bitwise_equal": True}
    print("# link down -> failure detected %.3f s, -> restart's mpirun %.3f s, -> training again %.3f s; resumed "
          "at step %d of %d reached: %d steps lost; final checkpoint equal to a fresh %d-rank run" %
          (m["down_to_detected_s"], at[1]["start"] - t_down, m["down_to_training_s"], r["from_step"],
           r["last_step"], r["steps_lost"], len(at[-1]["hosts"])))
    if rejoin:
        r2 = d["restarts"][1]
        m["rejoin_kill_to_training_s"] = r2["training_again"] - t_kill
        print("# 10.213.0.12 rejoined: killed rank -> training again on 3 hosts %.3f s, %d steps lost" %
              (m["rejoin_kill_to_training_s"], r2["steps_lost"]))
    return m


def with_hosts(hosts, fn, *args, **kw):
    """fn(tag, ...) with 3 fresh hosts, removed afterwards whatever happens."""
    tag = "el%d" % os.getpid()
    try:
        up = subprocess.run(["bash", hosts, "up", "3", "none", tag], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
        if up.returncode == 77:
            print(up.stdout.strip())
            sys.exit(77)
        if up.returncode != 0:
            fail("netns_hosts.sh up failed", up.stdout)
        return fn(tag, *args, **kw)
    finally:
        subprocess.run(["bash", hosts, "down", tag])


def main():
    hosts, anygrad, mpirun, work, case = sys.argv[1:6]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still removes the hosts
    hosts = os.path.abspath(hosts)
    if not mpirun:
        print("skip: no mpirun")
        sys.exit(77)
    c = subprocess.run(["bash", hosts, "check"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if c.returncode != 0:
        print(c.stdout.strip())
        sys.exit(77 if c.returncode == 77 else 1)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    if case not in ("down", "rejoin"):
        sys.exit("unknown case %r" % case)
    with_hosts(hosts, lambda tag: link_run(hosts, anygrad, mpirun, work, tag, rejoin=case == "rejoin"))
    print("ok: %s" % case)


if __name__ == "__main__":
    main()
