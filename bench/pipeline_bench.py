"""The pipeline on the local cluster, measured against doing the same by hand.

    python bench/pipeline_bench.py [--runs 5] [--steps 200] [--format markdown]

1. ansible-playbook playbooks/pretrain.yml (cluster already up) against the same three jobs
   (prepare, train, generate) submitted by hand in sequence with `sbatch --wait`;
2. completion latency: the training job's last log line (its own end time) -> the
   watching task's result line on the terminal, and Slurm queries per second while watching;
3. a no-op rerun of the finished pipeline: wall time and jobs of any kind it made (none: not
   even an allocation);
4. at 1, 3 and 8 local nodes: preflight (it asks Slurm, allocates nothing) and the node check
   step that every job starts with, in a job the size of the cluster;
5. orchestration overhead: pipeline wall time minus the jobs' own elapsed time, and the
   number of Ansible tasks it runs; the same for a new run nobody watches, its jobs chained
   (pretrain_watch=false, inference_after_training: the play returns, the samples job ends last).

Runs alternate (pipeline, by hand, pipeline, ...) so that drift on a noisy machine hits both.
The local cluster is brought up if it is down (and down again at the end), and left with
the node count it had.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
WORKSPACE = Path("/var/tmp/llmtrain-workspace")
RUN = "bench"
CLUSTER_DIR = Path("/var/lib/llmtrain-local-cluster")


SHIM_DIR = Path(tempfile.gettempdir()) / ("llmtrain-bench-%d" % os.getpid())  # made by shim(), removed by main()
QUERY_LOG = SHIM_DIR / "scontrol.log"


def shim():
    """scontrol on the playbooks' PATH that logs each call (time, who, arguments), then runs Slurm's.
    The jobs inherit that PATH: their own calls (the node check, the rendezvous address) are
    logged as `job`, the playbook's as `play`."""
    real = shutil.which("scontrol")
    SHIM_DIR.mkdir(mode=0o700)
    script = SHIM_DIR / "scontrol"
    script.write_text('#!/bin/sh\necho "$(date +%%s.%%N) ${SLURM_JOB_ID:+job}${SLURM_JOB_ID:-play} $*" >> %s\n'
                      'exec %s "$@"\n' % (QUERY_LOG, real))
    script.chmod(0o755)


def env():
    out = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1", PATH="%s:%s:%s" % (SHIM_DIR, BIN, os.environ.get("PATH", "")))
    out.pop("ANSIBLE_CALLBACK_RESULT_FORMAT", None)
    return out


def play(playbook, *extra, stamp=False):
    """ansible-playbook from the repository root -> (wall seconds, [(seconds since start, line)], rc)."""
    argv = [str(BIN / "ansible-playbook"), playbook] + list(extra)
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            universal_newlines=True, bufsize=1)
    lines = []
    for line in proc.stdout:
        lines.append((time.time() if stamp else time.monotonic() - started, line.rstrip("\n")))
    rc = proc.wait()
    wall = time.monotonic() - started
    if rc != 0:
        sys.stderr.write("\n".join(line for _stamp, line in lines[-60:]) + "\n")
        raise SystemExit("%s failed (rc %d)" % (" ".join(argv[1:]), rc))
    return wall, lines, rc


def slurm(*argv):
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, universal_newlines=True, timeout=120).stdout


def jobs_after(first_id):
    """Jobs the controller still knows with an id >= first_id: {name: [job dict]}."""
    out = slurm("squeue", "--noheader", "--states=all", "--format=%i|%j|%T|%S|%e")
    jobs = {}
    for line in out.splitlines():
        job_id, name, state, start, end = line.strip().split("|")
        if job_id.isdigit() and int(job_id) >= first_id:
            jobs.setdefault(name, []).append(dict(id=int(job_id), state=state, start=parse_time(start),
                                                  end=parse_time(end)))
    return jobs


def next_job_id():
    """The highest id the controller knows + 1: every job submitted from now on has one at least as high."""
    ids = [int(x) for x in slurm("squeue", "--noheader", "--states=all", "--format=%i").split() if x.isdigit()]
    return max(ids) + 1 if ids else 1


def parse_time(text):
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def cluster_nodes():
    """Node count of the running local cluster, or 0 when it is down."""
    if subprocess.run(["scontrol", "ping"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False).returncode != 0:
        return 0
    out = subprocess.run(["sinfo", "--noheader", "--format=%D"], stdout=subprocess.PIPE, universal_newlines=True,
                         check=False)
    return sum(int(x) for x in out.stdout.split() if x.isdigit())


def set_cluster(nodes):
    play("playbooks/local_cluster.yml", "-e", json.dumps({"local_cluster_nodes": nodes}))


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return dict(median=None, min=None, max=None, n=0)
    return dict(median=statistics.median(values), min=min(values), max=max(values), n=len(values))


def fmt(s, unit="s", digits=1):
    if s["median"] is None:
        return "n/a"
    return "%.*f %s (min %.*f, max %.*f, n=%d)" % (digits, s["median"], unit, digits, s["min"], digits, s["max"], s["n"])


# -- 1, 2, 3, 5: the pipeline and the same jobs by hand ------------------------------------

def pipeline_vars(steps, **more):
    # the export job is not among the jobs by hand: off here, measured on its own (after_training_bench.py)
    return ["-e", json.dumps(dict({"run_name": RUN, "pretrain_steps": steps, "pretrain_checkpoint_interval": 100,
                                   "local_cluster_enabled": False, "inference_export": False}, **more))]


def clean_run():
    shutil.rmtree(WORKSPACE / RUN, ignore_errors=True)
    shutil.rmtree(ROOT / "runs" / RUN, ignore_errors=True)


def run_pipeline(steps):
    clean_run()
    first = next_job_id()
    wall, lines, _rc = play("playbooks/pretrain.yml", *pipeline_vars(steps), stamp=True)
    started = lines[0][0] if lines else time.time()
    jobs = jobs_after(first)
    work = [j for js in jobs.values() for j in js]
    elapsed = sum((j["end"] - j["start"]) for j in work if j["start"] and j["end"])
    recap = re.search(r"ok=(\d+)\s+changed=(\d+)\s+unreachable=\d+\s+failed=\d+\s+skipped=(\d+)",
                      "\n".join(line for _stamp, line in lines))
    starts = [j["start"] for j in work if j["start"]]
    before_first = (min(starts) - started) if starts else None
    return dict(wall=wall, lines=lines, started=started, jobs=jobs, work_elapsed=elapsed, before_first_job=before_first,
                tasks=task_times([(t - started, line) for t, line in lines], (lines[-1][0] - started) if lines else 0),
                tasks_ok=int(recap.group(1)), tasks_skipped=int(recap.group(3)),
                latency=watch_latency(lines), polls=watch_polls(lines))


def run_chained(steps):
    """A new run nobody watches (pretrain_watch=false, inference_after_training): the play returns once
    its three jobs are queued, each behind the one before; the pipeline ends when the samples job does.
    Its overhead: from the play's start to the samples job's end, less the jobs' own elapsed time."""
    clean_run()
    first = next_job_id()
    started = time.time()
    returned, _lines, _rc = play("playbooks/pretrain.yml", *pipeline_vars(steps, pretrain_watch=False,
                                                                          inference_after_training=True))
    samples = "llmtrain-generate-%s" % RUN
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        jobs = jobs_after(first)
        if jobs.get(samples) and all(j["state"] not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")
                                     for js in jobs.values() for j in js):
            break
        time.sleep(0.5)
    else:
        raise SystemExit("the chained pipeline's samples job did not end within 600 s")
    if jobs[samples][-1]["state"] != "COMPLETED":
        raise SystemExit("the chained pipeline's samples job ended %s" % jobs[samples][-1]["state"])
    work = [j for js in jobs.values() for j in js]
    elapsed = sum((j["end"] - j["start"]) for j in work if j["start"] and j["end"])
    ended = max(j["end"] for j in work if j["end"])
    starts = [j["start"] for j in work if j["start"]]
    return dict(returned=returned, wall=ended - started, work_elapsed=elapsed, jobs=jobs,
                before_first_job=min(starts) - started if starts else None)


# the banner of the task that watches the training job (the one before it submits it, to queue the
# samples job behind it)
WATCH_TASK = "TASK [llmtrain.slurm.pretrain : Train - submit the training job or re-attach to the run's active one, then watch"


def watch_latency(lines):
    """The training job's own end line (in its log) -> the watch task's result on the terminal."""
    log_dir = WORKSPACE / RUN / "logs"
    ends = []
    for path in log_dir.glob("llmtrain-%s-*.out" % RUN):
        for line in path.read_text(errors="replace").splitlines():
            match = re.search(r"^llmtrain: job \d+ ends with exit code \d+ at (\S+)Z$", line)
            if match:
                stamp = match.group(1)[:26]  # microseconds are enough
                ends.append(datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%f")
                            .replace(tzinfo=datetime.timezone.utc).timestamp())
    seen = watch_window(lines)[1]
    if not ends or seen is None:
        return None
    return seen - max(ends)


def watch_window(lines):
    """(time of the watch task's banner, time of its result line) on the terminal; None when absent."""
    first = None
    for stamp, line in lines:
        if line.startswith(WATCH_TASK):
            first = stamp
        elif first is not None and re.match(r"^(ok|changed|fatal): \[", line):
            return first, stamp
    return first, None


def watch_polls(lines):
    """(Slurm queries, seconds) while the watch task ran: the playbook's scontrol calls the shim
    logged (not those of the job being watched)."""
    first, last = watch_window(lines)
    if not (first and last and QUERY_LOG.exists()):
        return (0, None)
    calls = [float(line.split()[0]) for line in QUERY_LOG.read_text().splitlines() if line.split()[1:2] == ["play"]]
    return (sum(1 for t in calls if first <= t <= last), last - first)


def manual_scripts(jobs):
    """The pipeline's own job scripts and options, for the same jobs by hand."""
    scripts = {}
    for name in ("llmtrain-prepare-%s" % RUN, "llmtrain-%s" % RUN, "llmtrain-generate-%s" % RUN):
        job = jobs[name][-1]
        path = SHIM_DIR / ("manual-%s.sh" % name)  # outside the run directory, which each pipeline run removes
        slurm("scontrol", "write", "batch_script", str(job["id"]), str(path))
        detail = slurm("scontrol", "show", "job", "-o", str(job["id"]))
        fields = dict(re.findall(r"([\w/:]+)=(\S+)", detail))
        scripts[name] = dict(path=path, workdir=fields["WorkDir"], nodes=fields["NumNodes"].split("-")[0],
                             cpus=fields.get("CPUs/Task", "1"), time=fields["TimeLimit"],
                             output=fields["StdOut"], mem=fields.get("MinMemoryNode"), mem_per_cpu=fields.get("MinMemoryCPU"))
    return scripts


def run_by_hand(scripts):
    """rm the data and the results, then sbatch --wait the three jobs in turn."""
    run_dir = WORKSPACE / RUN
    for sub in ("data", "checkpoints"):
        shutil.rmtree(run_dir / sub, ignore_errors=True)
        (run_dir / sub).mkdir()
    for name in ("metrics.jsonl", "PREEMPTED", "samples.json", "generate.done.json", "train.done.json", "data/prepare.done.json"):
        try:
            (run_dir / name).unlink()
        except FileNotFoundError:
            pass
    first = next_job_id()
    started = time.monotonic()
    returned = {}  # name -> seconds from its sbatch --wait to its return
    for name, job in scripts.items():
        argv = ["sbatch", "--wait", "--parsable", "--job-name=%s-manual" % name, "--chdir=%s" % job["workdir"],
                "--nodes=%s" % job["nodes"], "--cpus-per-task=%s" % job["cpus"], "--time=%s" % job["time"],
                "--output=%s" % job["output"].replace(".out", "-manual.out")]
        if job["mem"]:
            argv.append("--mem=%s" % job["mem"])
        elif job["mem_per_cpu"]:
            argv.append("--mem-per-cpu=%s" % job["mem_per_cpu"])
        submitted = time.monotonic()
        subprocess.run(argv + [str(job["path"])], check=True, stdout=subprocess.PIPE, timeout=3600)
        returned[name] = time.monotonic() - submitted
    wall = time.monotonic() - started
    by_name = jobs_after(first)
    jobs = [j for name, js in by_name.items() if name.endswith("-manual") for j in js]
    ran = dict((name, elapsed(by_name.get(name + "-manual", []))) for name in scripts)
    return dict(wall=wall, work_elapsed=sum(j["end"] - j["start"] for j in jobs if j["start"] and j["end"]),
                returned=returned, ran=ran)


def elapsed(jobs):
    """Seconds the newest of these jobs ran (Slurm's start and end, whole seconds), or None."""
    return (jobs[-1]["end"] - jobs[-1]["start"]) if jobs and jobs[-1]["start"] and jobs[-1]["end"] else None


def gap(jobs, before, after):
    """Seconds from the end of job `before` to the start of job `after` (whole seconds), or None."""
    first, second = jobs.get(before, [{}])[-1], jobs.get(after, [{}])[-1]
    if first.get("end") and second.get("start"):
        return second["start"] - first["end"]
    return None


def task_times(lines, wall):
    """[(seconds, task banner)] from the time between one banner and the next."""
    banners = [(t, line) for t, line in lines if line.startswith(("TASK [", "PLAY ["))]
    ends = [t for t, _line in banners[1:]] + [wall]
    return sorted(((end - t, line.rstrip(" *")) for (t, line), end in zip(banners, ends)), reverse=True)


def noop_rerun(steps):
    first = next_job_id()
    wall, lines, _rc = play("playbooks/pretrain.yml", *pipeline_vars(steps))
    submitted = [j for js in jobs_after(first).values() for j in js]  # allocations of any kind
    recap = re.search(r"changed=(\d+)", "\n".join(line for _stamp, line in lines))
    return dict(wall=wall, submitted=len(submitted), changed=int(recap.group(1)), tasks=task_times(lines, wall))


# -- 4: scaling with nodes -------------------------------------------------------------------

CHECK_SCRIPT = """#!/bin/bash
# the node check of the bench run, alone, on every node of the job: its cost, by node count
echo "check-start $(date +%s.%N)"
bash {scripts}/node_check.sh --require-torch
rc=$?
echo "check-end $(date +%s.%N) exit $rc"
"""


def check_step(nodes, tmp):
    """One job of `nodes` nodes that runs the node check only -> the check's seconds (from the
    job's own clock, so queueing is not counted)."""
    script = Path(tmp) / "check.sh"
    script.write_text(CHECK_SCRIPT.format(scripts=WORKSPACE / RUN / "scripts"))
    log = Path(tmp) / ("check-%d.out" % nodes)
    subprocess.run(["sbatch", "--wait", "--parsable", "--job-name=llmtrain-bench-check", "--nodes=%d" % nodes,
                    "--ntasks-per-node=1", "--time=5", "--output=%s" % log, "--chdir=%s" % tmp, str(script)],
                   check=True, stdout=subprocess.PIPE, timeout=600)
    text = log.read_text()
    start = float(re.search(r"check-start (\S+)", text).group(1))
    end, status = re.search(r"check-end (\S+) exit (\d+)", text).groups()
    if status != "0":
        raise SystemExit("the node check failed at %d nodes:\n%s" % (nodes, text[-3000:]))
    return float(end) - start


def scaling(sizes, runs, keep_nodes):
    results = {}
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        os.chmod(tmp, 0o755)
        for nodes in sizes:
            set_cluster(nodes)
            pre, check = [], []
            for _run in range(runs):
                wall, lines, _rc = play("playbooks/preflight.yml",
                                        "-e", json.dumps({"slurm_nodes": nodes, "run_name": RUN}))
                pre.append(wall)
                check.append(check_step(nodes, tmp))
            results[nodes] = dict(preflight=stats(pre), check=stats(check),
                                  tasks=dict((t, d) for d, t in task_times(lines, wall)))
        set_cluster(keep_nodes)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=200, help="training steps of each pipeline run")
    parser.add_argument("--sizes", default="1,3,8", help="node counts for the scaling runs")
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    args = parser.parse_args()

    shim()
    was = cluster_nodes()
    if was == 0:
        set_cluster(3)
    try:
        pipeline, manual = [], []
        scripts = None
        for i in range(args.runs):
            result = run_pipeline(args.steps)
            pipeline.append(result)
            scripts = scripts or manual_scripts(result["jobs"])
            manual.append(run_by_hand(scripts))
            print("run %d: pipeline %.1f s, by hand %.1f s, latency %s" % (
                i + 1, result["wall"], manual[-1]["wall"], result["latency"]), file=sys.stderr, flush=True)
        chained = []
        for i in range(args.runs):
            chained.append(run_chained(args.steps))
            print("chained run %d: the play returned after %.1f s, the samples job ended %.0f s after its start" % (
                i + 1, chained[-1]["returned"], chained[-1]["wall"]), file=sys.stderr, flush=True)
        # leave a finished pipeline run for the no-op reruns
        run_pipeline(args.steps)
        noops = [noop_rerun(args.steps) for _run in range(args.runs)]
        scale = scaling([int(x) for x in args.sizes.split(",")], args.runs, was or 3)
    finally:
        if was == 0:
            play("playbooks/local_cluster.yml", "-e", "local_cluster_state=absent")
        shutil.rmtree(SHIM_DIR, ignore_errors=True)
    print(render(args, pipeline, manual, noops, scale, chained))


def render(args, pipeline, manual, noops, scale, chained):
    p_wall = stats([r["wall"] for r in pipeline])
    m_wall = stats([m["wall"] for m in manual])
    ratios = stats([r["wall"] / m["wall"] for r, m in zip(pipeline, manual)])
    m_overhead = stats([m["wall"] - m["work_elapsed"] for m in manual])
    before_first = stats([r["before_first_job"] for r in pipeline])
    latency = stats([r["latency"] for r in pipeline])
    q_rates = stats([q / s for q, s in (r["polls"] for r in pipeline) if s])
    overhead = stats([r["wall"] - r["work_elapsed"] for r in pipeline])
    noop = stats([r["wall"] for r in noops])
    submitted = sum(r["submitted"] for r in noops)
    changed = max(r["changed"] for r in noops)
    slowest = noops[len(noops) // 2]["tasks"]
    median_run = sorted(pipeline, key=lambda r: r["wall"])[len(pipeline) // 2]
    one, most = scale[min(scale)], scale[max(scale)]
    scale_ratio = most["preflight"]["median"] / one["preflight"]["median"]
    kinds = (("prepare", "llmtrain-prepare-%s" % RUN), ("training", "llmtrain-%s" % RUN),
             ("generation", "llmtrain-generate-%s" % RUN))
    by_hand = "; ".join("%s job: ran %s, `sbatch --wait` returned after %s" % (
        kind, fmt(stats([m["ran"].get(name) for m in manual]), digits=0),
        fmt(stats([m["returned"].get(name) for m in manual]))) for kind, name in kinds)
    gaps = [("prepare job's end -> training job's start", kinds[0][1], kinds[1][1]),
            ("training job's end -> generation job's start (queued behind the training)",
             kinds[1][1], kinds[2][1])]

    def verdict(ok, what):
        return "met" if ok else "missed: %s" % what

    gap_rows = []
    for what, before, after in gaps:
        gap_s = stats([gap(r["jobs"], before, after) for r in pipeline])
        gap_rows.append("| 5. pipeline: %s | %s | report |" % (what, fmt(gap_s, digits=0)))
    c_overhead = stats([r["wall"] - r["work_elapsed"] for r in chained])
    gap_rows += [
        "| 5. chained, not watched (`pretrain_watch=false`, `inference_after_training`): the play returns | %s | report |"
        % fmt(stats([r["returned"] for r in chained])),
        "| 5. chained, not watched: before the first job starts | %s | report |"
        % fmt(stats([r["before_first_job"] for r in chained])),
        "| 5. chained, not watched: orchestration overhead (the play's start -> the samples job's end, less the jobs' "
        "elapsed) | %s | <= 8 s: %s |" % (fmt(c_overhead), verdict(c_overhead["median"] <= 8, "by %.1f s" % (c_overhead["median"] - 8)))]
    for what, before, after in gaps:
        gap_rows.append("| 5. chained, not watched: %s | %s | report |" % (
            what.split(" (", maxsplit=1)[0], fmt(stats([gap(r["jobs"], before, after) for r in chained]), digits=0)))

    out = [
        "Local cluster, 3 nodes x 2 ranks (CPU, gloo); each run trains %d steps of the local inventory's model "
        "(`-e run_name=%s -e pretrain_steps=%d -e local_cluster_enabled=false -e inference_export=false`: the export "
        "job, which the runs by hand do not have, is measured apart, in \"After training\"). Medians of %d runs, "
        "pipeline and by-hand runs alternating." % (args.steps, RUN, args.steps, args.runs),
        "",
        "| figure | result | target |",
        "|---|---|---|",
        "| 1. pipeline wall time | %s | |" % fmt(p_wall),
        "| 1. same 3 jobs by hand, `sbatch --wait` each | %s | |" % fmt(m_wall),
        "| 1. pipeline / by hand | %s | <= 0.9: %s |" % (
            fmt(ratios, unit="", digits=2), verdict(ratios["median"] <= 0.9, "by %.0f%%" % (100 * (ratios["median"] - 0.9)))),
        "| 1. before the first job starts (preflight, env files, deploy) | %s | <= 8 s: %s |" % (
            fmt(before_first), verdict(before_first["median"] <= 8, "by %.1f s" % (before_first["median"] - 8))),
        "| 2. job end -> watch task returns | %s | <= 1 s: %s |" % (
            fmt(latency, digits=2),
            verdict(latency["median"] is not None and latency["median"] <= 1.0, "by %.2f s" % ((latency["median"] or 0) - 1.0))),
        "| 2. Slurm queries per second while watching (the watching task's, not the job's own) | %s | <= 1 |" % fmt(q_rates, unit="/s", digits=2),
        "| 3. no-op rerun | %s, %d job(s) or allocation(s), changed=%d | <= 5 s, 0 allocations: %s |" % (
            fmt(noop), submitted, changed,
            verdict(noop["median"] <= 5 and submitted == 0, "by %.1f s" % (noop["median"] - 5))),
        "| 5. orchestration overhead (wall - jobs' elapsed) | %s | report |" % fmt(overhead),
        "| 5. the same for the jobs by hand (`sbatch --wait` polling) | %s | report |" % fmt(m_overhead),
        "| 5. Ansible tasks per pipeline run | %d ok, %d skipped | report |" % (
            pipeline[0]["tasks_ok"], pipeline[0]["tasks_skipped"]),
    ] + gap_rows + [
        "",
        "By hand, each job (Slurm's times, whole seconds): %s. `sbatch --wait` looks at its job 2, 10, 42, "
        "74, ... s after submitting it (Slurm's src/sbatch/sbatch.c, `_job_wait`: it sleeps 2 s, then four "
        "times as long each time, up to 32 s), so a job by hand takes the first of those points after its "
        "end, and the by-hand wall time, and with it the ratio above, moves in steps as the jobs get longer "
        "or shorter: a training job that ends after 42 s takes 74 s by hand." % by_hand,
        "",
        "Everything before the pipeline's first job starts (preflight, the env files, deploy) takes %s, against "
        "nothing by hand; `sbatch --wait` by hand loses time instead after each job ends (its polling backs off), "
        "which the pipeline's once-a-second watch does not. A no-op rerun reads the run's pipeline.json and "
        "runs no stage." % fmt(before_first),
        "",
        "Before that record and the pre-job changes (this bench on 2026-12-01): no-op rerun 19.0 s (113 tasks, "
        "stage by stage), 18.5 s before the first job, pipeline / by hand 0.96.",
        "",
        "Where a no-op rerun spends its time (one run; %d tasks, the rest under 0.3 s each; Ansible's own "
        "start is the rest of its wall time):" % len(slowest),
        "",
        "| seconds | task |",
        "|---:|---|",
    ] + ["| %.2f | %s |" % (d, t.replace("|", "/")) for d, t in slowest if d >= 0.3] + [
        "",
        "Where a pipeline run spends its time (the run of median wall time; its tasks of 0.5 s or more, "
        "the waits on its jobs included, %d tasks in all):" % len(median_run["tasks"]),
        "",
        "| seconds | task |",
        "|---:|---|",
    ] + ["| %.2f | %s |" % (d, t.replace("|", "/")) for d, t in median_run["tasks"] if d >= 0.5] + [
        "",
        "4. Preflight (inputs and what Slurm has; no allocation) and the node check step every job starts "
        "with (one job of that many nodes running only the check, timed by the job itself), by local node count:",
        "",
        "| nodes | preflight | node check step |",
        "|---:|---|---|",
    ]
    for nodes in sorted(scale):
        s = scale[nodes]
        out.append("| %d | %s | %s |" % (nodes, fmt(s["preflight"]), fmt(s["check"])))
    ratio_verdict = verdict(scale_ratio <= 1.3, "by %.0f%%" % (100 * (scale_ratio - 1.3)))
    out += ["", "Preflight at %d nodes / at %d nodes: %.2f (target <= 1.3: %s): it reads Slurm's node list "
            "and never waits for a node." % (max(scale), min(scale), scale_ratio, ratio_verdict)]
    out += ["", "The local cluster's nodes share this machine's %d cores: the check starts one Python (which "
            "imports torch) per node, so here its cost grows with the node count, where real nodes would run "
            "it side by side." % os.cpu_count()]
    if args.format == "text":
        return "\n".join(line.replace("|", " ") for line in out)
    return "\n".join(out)


if __name__ == "__main__":
    main()
