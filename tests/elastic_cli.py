#!/usr/bin/python3
"""`anygrad launch` (docs/distributed.md, "Elastic runs"), one case per run:

  elastic_cli.py ANYGRAD MPIRUN WORKDIR CASE

Hosts are names (h1, h2, h3) reached through a test agent that runs the
command on this machine unless WORKDIR/dead/HOST exists, when it fails as an
unreachable host does; mpirun starts its daemons through the same agent.

  kill       3 hosts; once rank 1 has done step KILL_AT, h2 is marked dead and
             rank 1's process (its pid from the heartbeat file) gets SIGKILL.
             The launcher must restart from the last checkpoint with h1 and h3
             and finish; the final checkpoint must equal, byte for byte, a
             fresh 2-rank mpirun from the checkpoint the restart resumed from.
  min_hosts  the same kill with --min-hosts 3: exit 1, "fewer than
             --min-hosts"; and a start with a host already dead likewise.
  rejoin     h3 dead at the start (2 ranks); at step KILL_AT h3 comes back and
             rank 1 is killed with its host alive: the restart runs 3 ranks.
  stall      rank 1 stopped (SIGSTOP, as a host whose link is down) and h2
             marked dead: --stall-timeout 3 ends the attempt, the restart runs
             with h1 and h3.
  restarts   a command that always fails: --max-restarts 1 stops after two
             attempts, exit 1; the file already at the checkpoint path (an
             earlier run's) is not resumed from.
  usage      --help, usage errors (exit 2), an mpirun that does not exist.
Exit 77 (skip) when the MPI module is not built."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

STEPS, SAVE_EVERY, KILL_AT = 400, 20, 60
TRAIN = ["train", "--dist", "mpi", "--device", "cpu", "--threads", "1", "--balance", "off", "--steps", str(STEPS),
         "--batch", "48", "--hidden", "64", "--samples", "0", "--profile", "off", "--log-every", "100",
         "--save-every", str(SAVE_EVERY)]


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
             AG_NUM_THREADS="1", OMP_NUM_THREADS="1")
    e.pop("AG_DIST_TIMEOUT_MS", None)
    return e


def make_agent(work):
    dead = os.path.join(work, "dead")
    os.makedirs(dead, exist_ok=True)
    agent = os.path.join(work, "agent.sh")
    with open(agent, "w") as f:
        # Open MPI's daemons of hosts that share one machine race to create
        # the same session directory: one tmpdir per host.
        f.write('#!/bin/sh\n# HOST CMD...: CMD here, unless HOST is marked dead\nh=$1; shift\n'
                '[ -e "%s/$h" ] && { echo "agent: $h unreachable" >&2; exit 255; }\n'
                'OMPI_MCA_orte_tmpdir_base="%s/tmp/$h"; export OMPI_MCA_orte_tmpdir_base\n'
                'mkdir -p "$OMPI_MCA_orte_tmpdir_base"\nexec /bin/sh -c "$*"\n' % (dead, work))
    os.chmod(agent, 0o755)
    return agent, dead


def beat(path):
    """(pid, step) of a heartbeat file, or None."""
    try:
        w = open(path).read().split()
    except OSError:
        return None
    if len(w) < 11 or w[0] != "anygrad-heartbeat":
        return None
    return int(w[2]), int(w[6])


def launch(anygrad, mpirun, work, hosts, extra=(), kill=None, revive=None, timeout=180, sig=signal.SIGKILL,
           kill_at=KILL_AT):
    """Run the launcher; kill=(rank, host to mark dead or None) at step
    KILL_AT with sig; revive: a host to unmark at that moment. Returns (rc,
    output, json or None, kill time)."""
    agent, dead = make_agent(work)
    ck = os.path.join(work, "ck.safetensors")
    run_dir = os.path.join(work, "run")
    js = os.path.join(work, "launch.json")
    for p in (ck, js):
        if os.path.exists(p):
            os.unlink(p)
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [anygrad, "launch", "--hosts", hosts, "--agent", agent, "--mpirun", mpirun, "--run-dir", run_dir,
           "--json", js, *extra, "--", anygrad, *TRAIN, "--out", ck]
    log = open(os.path.join(work, "launch.log"), "w+")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env())
    t_kill = None
    t_end = time.time() + timeout
    while p.poll() is None and time.time() < t_end:
        if kill and t_kill is None:
            b = beat(os.path.join(run_dir, "heartbeat.%d" % kill[0]))
            if b and b[1] >= kill_at:
                if revive:
                    os.unlink(os.path.join(dead, revive))
                if kill[1]:
                    open(os.path.join(dead, kill[1]), "w").close()
                os.kill(b[0], sig)
                t_kill = time.time()
                print("# killed rank %d (pid %d) after its step %d" % (kill[0], b[0], b[1]))
        time.sleep(0.005)
    if p.poll() is None:
        p.kill()
        p.wait()
        log.seek(0)
        sys.exit("FAIL: the launcher still ran after %d s\n%s" % (timeout, log.read()))
    log.seek(0)
    out = log.read()
    log.close()
    data = json.load(open(js)) if os.path.exists(js) else None
    return p.returncode, out, data, t_kill


def fail(msg, out=""):
    sys.exit("FAIL: %s\n---- output:\n%s" % (msg, out))


def kill_run(anygrad, mpirun, work, kill_at=KILL_AT):
    """The kill case; returns its measurements (also for bench/elastic_bench.py)."""
    rc, out, d, t_kill = launch(anygrad, mpirun, work, "h1,h2,h3", kill=(1, "h2"), kill_at=kill_at)
    if t_kill is None:
        fail("rank 1 never reached step %d" % kill_at, out)
    if rc != 0 or not d or d["result"] != "ok":
        fail("the launcher did not finish (exit %d)" % rc, out)
    at = d["attempts"]
    if len(at) != 2 or len(d["restarts"]) != 1:
        fail("expected 2 attempts and 1 restart, got %d and %d" % (len(at), len(d["restarts"])), out)
    if at[0]["hosts"] != ["h1", "h2", "h3"] or at[1]["hosts"] != ["h1", "h3"] or at[0]["lost"] != ["h2"]:
        fail("hosts: %s then %s, lost %s" % (at[0]["hosts"], at[1]["hosts"], at[0]["lost"]), out)
    if at[0]["exit_code"] == 0 or at[0]["last_step"] >= STEPS:
        fail("the first attempt was not cut short by the kill", out)
    r = d["restarts"][0]
    if r["from_step"] <= 0 or r["from_step"] % SAVE_EVERY or not 0 <= r["steps_lost"] <= SAVE_EVERY:
        fail("resumed at step %d with %d steps lost (checkpoints every %d)" % (r["from_step"], r["steps_lost"],
                                                                              SAVE_EVERY), out)
    if at[1]["last_step"] != STEPS or not r["training_again"]:
        fail("the restart did not train to step %d" % STEPS, out)
    # the fresh reference: 2 ranks from the checkpoint the restart resumed from
    ref = os.path.join(work, "ref.safetensors")
    cmd = [mpirun, "-np", "2", anygrad, *TRAIN, "--resume", at[1]["resume"], "--out", ref]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env(), timeout=120, text=True)
    if p.returncode != 0:
        fail("the reference run failed", p.stdout)
    a, b = open(os.path.join(work, "ck.safetensors"), "rb").read(), open(ref, "rb").read()
    if a != b:
        fail("the elastic run's final checkpoint (%d bytes) differs from the fresh 2-rank run's (%d bytes)" %
             (len(a), len(b)), out)
    m = {"kill_to_detected_s": r["detected"] - t_kill, "kill_to_training_s": r["training_again"] - t_kill,
         "progress_to_training_s": r["seconds_to_training"], "steps_lost": r["steps_lost"],
         "detected_to_restart_s": at[1]["start"] - r["detected"],
         "restart_to_training_s": r["training_again"] - at[1]["start"],
         "from_step": r["from_step"], "last_step": r["last_step"], "bitwise_equal": a == b}
    print("# kill -> failure detected %.3f s, kill -> training again %.3f s (last progress -> training %.3f s); "
          "resumed at step %d of %d reached: %d steps lost; final checkpoint equal to the fresh 2-rank run" %
          (m["kill_to_detected_s"], m["kill_to_training_s"], m["progress_to_training_s"], m["from_step"],
           m["last_step"], m["steps_lost"]))
    return m


def case_min_hosts(anygrad, mpirun, work):
    rc, out, d, t_kill = launch(anygrad, mpirun, work, "h1,h2,h3", extra=["--min-hosts", "3"], kill=(2, "h3"))
    if t_kill is None or rc != 1 or "fewer than --min-hosts 3" not in out or d["result"] != "error":
        fail("below --min-hosts: exit %d" % rc, out)
    if len(d["attempts"]) != 1 or d["attempts"][0]["lost"] != ["h3"]:
        fail("expected one attempt that lost h3", out)
    # already below at the start: no attempt at all
    rc, out, d, _ = launch(anygrad, mpirun, work, "h1,h2,h3", extra=["--min-hosts", "3"])
    if rc != 1 or "2 hosts answer, fewer than --min-hosts 3" not in out or d["attempts"]:
        fail("a start below --min-hosts: exit %d" % rc, out)


def case_rejoin(anygrad, mpirun, work):
    agent, dead = make_agent(work)
    open(os.path.join(dead, "h3"), "w").close()
    rc, out, d, t_kill = launch(anygrad, mpirun, work, "h1,h2,h3", kill=(1, None), revive="h3")
    if t_kill is None or rc != 0:
        fail("exit %d" % rc, out)
    at = d["attempts"]
    if [a["hosts"] for a in at] != [["h1", "h2"], ["h1", "h2", "h3"]] or at[0]["rejoined"] != ["h3"]:
        fail("attempts on %s, rejoined %s" % ([a["hosts"] for a in at], at[0]["rejoined"]), out)
    print("# h3 dead at the start: 2 ranks; back when rank 1 was killed: the restart ran 3")


def case_stall(anygrad, mpirun, work):
    """A rank that stops (SIGSTOP: its host's link down) is not an exit:
    the group waits at its next collective. --stall-timeout ends the attempt."""
    rc, out, d, t_kill = launch(anygrad, mpirun, work, "h1,h2,h3", extra=["--stall-timeout", "3"], kill=(1, "h2"),
                                sig=signal.SIGSTOP)
    if t_kill is None or rc != 0 or "no heartbeat for 3.0 s" not in out:
        fail("exit %d" % rc, out)
    at = d["attempts"]
    if not at[0]["stalled"] or [a["hosts"] for a in at] != [["h1", "h2", "h3"], ["h1", "h3"]]:
        fail("attempts on %s, stalled %s" % ([a["hosts"] for a in at], at[0]["stalled"]), out)
    print("# stopped rank: the attempt ended %.3f s after the stop, training again after %.3f s" %
          (d["restarts"][0]["detected"] - t_kill, d["restarts"][0]["training_again"] - t_kill))


def case_restarts(anygrad, mpirun, work):
    agent, _ = make_agent(work)
    js = os.path.join(work, "r.json")
    # a file already at the checkpoint path is an earlier run's: not resumed
    stale = os.path.join(work, "stale.safetensors")
    open(stale, "w").write("an earlier run's checkpoint")
    cmd = [anygrad, "launch", "--hosts", "h1", "--agent", agent, "--mpirun", mpirun, "--max-restarts", "1",
           "--checkpoint", stale, "--run-dir", os.path.join(work, "rr"), "--json", js, "--", "false"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env(), timeout=120, text=True)
    d = json.load(open(js))
    if p.returncode != 1 or "more than --max-restarts 1" not in p.stdout or len(d["attempts"]) != 2:
        fail("exit %d, %d attempts" % (p.returncode, len(d["attempts"])), p.stdout)
    if d["attempts"][1]["resume"] is not None or "runs the command as given" not in p.stdout:
        fail("the restart resumed from a checkpoint this job did not write", p.stdout)


def case_usage(anygrad, mpirun, work):
    def run(args, want, text):
        p = subprocess.run([anygrad, "launch", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env(),
                           timeout=60, text=True)
        if p.returncode != want or text not in p.stdout:
            fail("launch %s: exit %d (want %d), output lacks %r" % (" ".join(args), p.returncode, want, text),
                 p.stdout)
    agent, _ = make_agent(work)
    cmd = ["--", anygrad, *TRAIN, "--out", os.path.join(work, "u.st")]
    run(["--help"], 0, "usage: anygrad launch")
    run(cmd, 2, "--hosts is required")
    run(["--hosts", "h1,h2"], 2, "no command")
    run(["--hosts", "h1,h2", "--"], 2, "no command")
    run(["--hosts", "h1,h2", "--min-hosts", "3", *cmd], 2, "--min-hosts 3 is more than the 2 hosts")
    run(["--hosts", "h1", "--min-hosts", "0", *cmd], 2, "--min-hosts expects")
    run(["--hosts", "h1,,h2", *cmd], 2, "empty item")
    run(["--hosts", "h1", "--max-restarts", "-1", *cmd], 2, "--max-restarts expects")
    run(["--hosts", "h1", "--bogus", *cmd], 2, "unknown option")
    run(["--hosts", "h1", "--", anygrad, "train", "--dist", "mpi"], 2, "no checkpoint to restart from")
    run(["--hosts", "h1,h2", *cmd, "--zero", "1"], 2, "sharded optimizer (--zero) is not restartable")
    # the options of anygrad train the launcher relies on
    p = subprocess.run([anygrad, "train", "--heartbeat", "", "--steps", "1"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, env=env(), timeout=60, text=True)
    if p.returncode != 2 or "--heartbeat must not be empty" not in p.stdout:
        fail("train --heartbeat '': exit %d" % p.returncode, p.stdout)
    p = subprocess.run([anygrad, "train", "--save-every", "-1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       env=env(), timeout=60, text=True)
    if p.returncode != 2 or "--save-every expects" not in p.stdout:
        fail("train --save-every -1: exit %d" % p.returncode, p.stdout)
    run(["--hosts", "h1", "--agent", agent, "--mpirun", os.path.join(work, "no-such-mpirun"),
         "--run-dir", os.path.join(work, "ur"), *cmd], 1, "cannot run")


def main():
    anygrad, mpirun, work, case = sys.argv[1:5]
    if not mpirun:
        print("skip: no mpirun")
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    {"kill": kill_run, "min_hosts": case_min_hosts, "rejoin": case_rejoin, "stall": case_stall,
     "restarts": case_restarts,
     "usage": case_usage}[case](anygrad, mpirun, work)
    print("ok: %s" % case)


if __name__ == "__main__":
    main()
