"""The collection's own code at the sizes the design is for: jobs of up to 8,192 nodes x 8 ranks, a week long.

    python bench/scale_bench.py                          # text
    python bench/scale_bench.py --format markdown        # a section for docs/benchmarks.md
    python bench/scale_bench.py --sizes 8,64 --days 0.1  # a quick run

Each stage runs the real code on generated inputs in the real formats, in a temporary
directory: the trainer's loss record and node_times.json (roles/deploy/files/trainer), one
poll of the watch (the slurm_job_info module, in this process as AnsiballZ would run it, with
scontrol answering from recorded 22.05 output for a job of N nodes), the run report
(plugins/module_utils/rundir/run_report.py), resuming the metrics file (the trainer's MetricsLog), failure
diagnosis (job_log.log_summary) on the log of a job whose rank fails first among all others,
`scontrol show node` parsing, and the nccl_env stage (ansible-playbook on an inventory of N
hosts). Every stage is printed against node count, with the growth exponent (the slope of
log(time) over log(nodes)), then the verdict against the design's targets at 2,048 nodes.
A stage that fails says "not measured" and why; the others go on.
"""

import argparse
import contextlib
import io
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "roles" / "deploy" / "files"), str(ROOT / "bench")]

from ansible_collections.llmtrain.slurm.plugins.module_utils.progress import metrics  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import slurm_parse  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import job_log  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.node import network_check, node_check  # noqa: E402

SIZES = [8, 64, 512, 2048, 8192]
TARGET = 2048  # the node count the targets are for
RANKS_PER_NODE = 8
JOB_ID = 4242
HOUR, DAY = 3600, 86400
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "slurm"
TARGETS = {  # what the design promises at TARGET nodes
    "record_bytes": 1024, "poll_cpu_ms": 50, "poll_result_bytes": 16384, "nccl_env_s": 10, "report_s": 30,
    "resume_s": 1,
}
POLL_RUNS = 3
WATCH_POLL_S = 5  # pretrain_poll_interval's default
NCCL_ENV_FAST_S = 30  # the stage runs at 8,192 nodes too when 2,048 took less than this


def node_name(index, width=None):
    """node0000 ..., or a name of `width` characters (the longest a record must hold)."""
    name = "node%04d" % index
    return name if width is None else (name + "-" + "x" * width)[:width - 5] + "%05d" % index


def cpu_children():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Clock:
    """CPU seconds of this process and of its waited-for children, and wall seconds, of a block."""

    def __enter__(self):
        self.started = (time.process_time(), cpu_children(), time.perf_counter())
        return self

    def __exit__(self, *_exc):
        cpu, children, wall = self.started
        self.cpu, self.children = time.process_time() - cpu, cpu_children() - children
        self.wall = time.perf_counter() - wall


def not_measured(err):
    return "not measured: %s" % (" ".join(str(err).split())[:160] or type(err).__name__)


def step_times(nodes):
    """{node: {work_ms, wait_ms}} as the trainer's node_step_times gives it: one node in 64 slower."""
    return {name: {"work_ms": round(180.0 + (i % 7) * 0.5 + (40.0 if i % 64 == 3 else 0.0), 2),
                   "wait_ms": round(20.0 + (i % 5) * 0.25, 2)} for i, name in enumerate(nodes)}


# ---------------------------------------------------------------------------------------------- inputs


def loss_record(trainer_metrics, nodes, step=1):
    """A loss record as Trainer.record writes it on a GPU cluster, with node_times of `nodes`."""
    record = {"step": step, "total_steps": 7 * DAY, "loss": 2.875, "lr": 0.00029998, "grad_norm": 0.8125,
              "tokens_seen": step * 4194304, "tokens_per_s": 4194304.0, "elapsed_s": float(step), "eta_s": 604799.0,
              "mfu": 0.4125}
    return trainer_metrics.with_node_times(record, step_times(nodes))


def write_metrics(path, record, seconds):
    """metrics.jsonl of a run of `seconds` at a loss record a second; only step, loss and time vary."""
    rest = json.dumps({k: v for k, v in record.items() if k not in ("step", "loss", "elapsed_s")})
    line = '{"step": %d, "loss": %.4f, "elapsed_s": %d.0, ' + rest[1:].replace("%", "%%") + "\n"
    with open(path, "w") as handle:
        for start in range(1, seconds + 1, 10000):
            handle.write("".join(line % (s, 2.0 + 8.0 / math.sqrt(s), s)
                                 for s in range(start, min(seconds, start + 9999) + 1)))


def write_node_times(trainer_metrics, path, nodes, records=3):
    """node_times.json as rank 0 leaves it after `records` loss records."""
    times = trainer_metrics.NodeTimes(Path(path))
    for step in range(1, records + 1):
        found = step_times(nodes)
        times.add(step, found, loss_record(trainer_metrics, nodes, step)["node_times"]["median_work_ms"])


def write_node_check(directory, out, nodes):
    """node_check.json of a job of `nodes`, by the node check's own gather (one node lacks ib0)."""
    os.makedirs(directory, exist_ok=True)
    for i, name in enumerate(nodes):
        record = dict(node=name, token="t", dir=directory, python="/shared/venv/bin/python", python_version="3.11.9",
                      torch={"importable": True, "version": "2.5.1+cu124", "cuda": "12.4"}, require_torch=True,
                      gpus_requested=8, gpus_visible=8, nvidia_smi_count=8, torch_count=8, detected=8,
                      gpu_reason=None, gpu_names=["NVIDIA H100 80GB HBM3"] * 8, registered=8,
                      env_file="/shared/work/run/env/cluster.env", interfaces=["eth0", "ib0", "lo"],
                      missing_interfaces=["ib0"] if i == 3 else [], workspace_shared=True, workspace_writable=True)
        record["problems"] = node_check.problems(record, "slurm_python", "strict")
        record["ok"] = not record["problems"]
        with open(os.path.join(directory, name + ".json"), "w") as handle:
            json.dump(record, handle)
    args = argparse.Namespace(dir=directory, token="t", nodes=nodes, out=out, bad_nodes_file=None, timeout="120",
                              python="slurm_python", job=str(JOB_ID), restart=0)
    with contextlib.redirect_stdout(io.StringIO()):
        node_check.gather(args)


def write_network_check(out, nodes):
    """network_check.json of a job of `nodes` on 400 Gb/s links, judged by the check's own code."""
    found = [dict(node=name, rank=i * RANKS_PER_NODE, kind="ib", interfaces=["mlx5_%d" % k for k in range(8)],
                  gbps=3200.0, nvlink_gbps=900.0) for i, name in enumerate(nodes)]
    sweep = [dict(bytes=size, seconds=2e-5 + size / 3.2e11, iters=50,
                  busbw=network_check.bus_bandwidth(size, 2e-5 + size / 3.2e11, len(nodes) * RANKS_PER_NODE))
             for size in network_check.sizes(1 << 30)]
    busbw, latency_us = network_check.summary_of(sweep)
    verdict = network_check.judge(found, [], dict(busbw=busbw, latency_us=latency_us), 0.5)
    result = dict(job_id=str(JOB_ID), restart=0, backend="nccl", ranks=len(nodes) * RANKS_PER_NODE, verdict="ok",
                  time="2026-12-03T10:00:00Z", busbw=busbw, latency_us=latency_us, limit=verdict["limit"],
                  fraction=verdict["fraction"], min_fraction=0.5, sizes=sweep, pairs=[], slow=verdict["slow"],
                  slow_fabric=verdict["slow_fabric"], seconds=41.2, import_seconds=6.1, connect_seconds=9.8,
                  nodes=[dict(n, **verdict["per_node"][n["node"]]) for n in found],
                  table=network_check.table(found, verdict))
    node_check.write_json(out, result)


def hostlist(nodes):
    return "node[0000-%04d]" % (len(nodes) - 1) if len(nodes) > 1 else nodes[0]


def fake_slurm(directory, nodes, stdout_path):
    """A bin directory whose scontrol, sinfo and sacct print recorded 22.05 output for a running
    job of `nodes` (and those nodes); put it first on PATH."""
    job = (FIXTURES / "scontrol_job_running.txt").read_text().strip()
    ranks = len(nodes) * RANKS_PER_NODE
    for key, value in (("JobId", str(JOB_ID)), ("JobName", "pretrain-scale"), ("NodeList", hostlist(nodes)),
                       ("BatchHost", nodes[0]), ("NumNodes", str(len(nodes))), ("NumCPUs", str(ranks * 4)),
                       ("NumTasks", str(ranks)), ("TRES", "cpu=%d,mem=%dG,node=%d,billing=%d,gres/gpu=%d"
                                                  % (ranks * 4, len(nodes) * 1024, len(nodes), ranks * 4, ranks)),
                       ("StdOut", stdout_path), ("StdErr", stdout_path)):
        job = " ".join(key + "=" + value if part.startswith(key + "=") else part for part in job.split(" "))
    answers = Path(directory)
    (answers / "job.txt").write_text(job + "\n")
    (answers / "nodes.txt").write_text(node_lines(nodes))
    (answers / "sinfo.txt").write_text("%d allocated\n" % len(nodes))
    bin_dir = answers / "bin"
    bin_dir.mkdir()
    scripts = {
        "scontrol": 'case "$1 $2" in\n"show job") cat "%s/job.txt" ;;\n"show node") cat "%s/nodes.txt" ;;\n'
                    '"--version ") echo "slurm 22.05.8" ;;\n*) echo "unexpected: $*" >&2; exit 1 ;;\nesac\n'
                    % (answers, answers),
        "sinfo": 'cat "%s/sinfo.txt"\n' % answers,
        "sacct": 'echo "Slurm accounting storage is disabled" >&2\nexit 1\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


def node_lines(nodes):
    """`scontrol show node -o` of `nodes`: the recorded line of a node, renamed and given 8 GPUs."""
    line = (FIXTURES / "scontrol_show_node_gres.txt").read_text().splitlines()[0]
    first = line.split(" ", 1)[0].split("=", 1)[1]
    return "".join(line.replace(first, name) + "\n" for name in nodes)


# ---------------------------------------------------------------------------------------------- stages


def stage_record(trainer_metrics, sizes):
    """The trainer's loss record, and rank 0's work per record (its node_times and node_times.json)."""
    rows = []
    for n in sizes:
        nodes = [node_name(i, 64) for i in range(n)]
        short = [node_name(i) for i in range(n)]
        row = {"nodes": n}
        try:
            row["record_bytes"] = len(json.dumps(loss_record(trainer_metrics, nodes))) + 1
            row["short_record_bytes"] = len(json.dumps(loss_record(trainer_metrics, short))) + 1
            with tempfile.TemporaryDirectory() as tmp:
                times = trainer_metrics.NodeTimes(Path(tmp) / "node_times.json")
                samples = [(name, 0.18 * 50, 0.02 * 50) for name in short for _rank in range(RANKS_PER_NODE)]
                with Clock() as clock:
                    found = trainer_metrics.node_step_times(samples, 50)
                    summary = trainer_metrics.node_times_summary(found, 600)
                    times.add(50, found, summary["median_work_ms"])
                row["cpu_ms"] = 1000 * clock.cpu
                row["node_times_bytes"] = os.path.getsize(times.path)
        except Exception as err:  # the trainer's API mid-change: said, not fatal
            row["error"] = not_measured(err)
        rows.append(row)
    return dict(title="The trainer's loss record (rank 0, each record)", rows=rows, time="cpu_ms", columns=[
        ("record_bytes", "record bytes (64-char names)", "%d"), ("short_record_bytes", "record bytes (node0001)", "%d"),
        ("cpu_ms", "rank 0 CPU ms per record", "%.2f"), ("node_times_bytes", "node_times.json bytes", "%d")],
        note="Rank 0's CPU per record: node_step_times over every rank's times, node_times_summary and "
             "NodeTimes.add (which rewrites node_times.json).")


def run_module(main, args):
    """(result, module CPU s, Slurm commands' CPU s, result bytes) of one module run in this process."""
    from ansible.module_utils.testing import patch_module_args
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), Clock() as clock:
        try:
            main()
        except SystemExit:
            pass
    text = out.getvalue()
    return json.loads(text), clock.cpu, clock.children, len(text.strip())


def stage_poll(tmp, sizes, histories, metrics_files):
    """One poll of the watch at N nodes: slurm_job_info with the metrics, node check and network check files."""
    from ansible_collections.llmtrain.slurm.plugins.modules import slurm_job_info
    rows = []
    longest = max(histories)
    for n in sizes:
        for seconds in ([longest] if n != TARGET else histories):
            row = {"nodes": n, "history": seconds}
            try:
                nodes = [node_name(i) for i in range(n)]
                work = Path(tmp) / ("poll-%d-%d" % (n, seconds))
                work.mkdir()
                write_node_check(str(work / "node_check"), str(work / "node_check.json"), nodes)
                write_network_check(str(work / "network_check.json"), nodes)
                (work / "job.out").write_text("step 1/604800 loss 2.8750\n")
                bin_dir = fake_slurm(work, nodes, str(work / "job.out"))
                args = dict(job_id=[str(JOB_ID)], metrics_file=metrics_files[seconds],
                            node_check_file=str(work / "node_check.json"),
                            network_check_file=str(work / "network_check.json"))
                path = os.environ["PATH"]
                os.environ["PATH"] = "%s:%s" % (bin_dir, path)
                try:
                    run_module(slurm_job_info.main, args)  # warm: imports and page cache, as on a second poll
                    # the least of POLL_RUNS: what the module needs, less what others on the CPUs took
                    result, cpu, children, size = min((run_module(slurm_job_info.main, args)
                                                       for _run in range(POLL_RUNS)), key=lambda found: found[1])
                finally:
                    os.environ["PATH"] = path
                if result.get("failed"):
                    raise RuntimeError(result.get("msg"))
                row.update(cpu_ms=1000 * cpu, slurm_cpu_ms=1000 * children, result_bytes=size,
                           input_bytes=os.path.getsize(work / "node_check.json")
                           + os.path.getsize(work / "network_check.json"))
            except Exception as err:
                row["error"] = not_measured(err)
            rows.append(row)
    return dict(title="One poll of the watch (slurm_job_info)", rows=rows, time="cpu_ms", series=longest, columns=[
        ("history", "metrics.jsonl of", fmt_history), ("cpu_ms", "module CPU ms", "%.1f"),
        ("slurm_cpu_ms", "faked Slurm CPU ms", "%.1f"), ("result_bytes", "result bytes", "%d"),
        ("input_bytes", "node/network check files bytes", "%d")],
        note="The module runs in this process as AnsiballZ runs it (its main() with the arguments JSON), after "
             "one warm-up run, the least of %d runs: the CPU is the module's own work, without Python's or "
             "Ansible's start-up. scontrol/sinfo/sacct are shell scripts that print recorded Slurm 22.05 output "
             "for the job." % POLL_RUNS)


# the report written in a fresh process (the action llmtrain.slurm.run_report calls write_report in the task's)
REPORT_CALL = ("import sys; from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir.run_report import write_report; "
               "write_report(sys.argv[1])")


def collection_env():
    """The environment of a process that imports this checkout's collection."""
    paths = [str(ROOT / ".collections")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths))


def stage_report(trainer_metrics, tmp, sizes, histories, metrics_files):
    """The run report (run_report.py's write_report, as the run role's action calls it) on metrics and
    node_times.json."""
    rows = []
    longest = max(histories)
    for n in sizes:
        for seconds in ([min(histories)] if n != TARGET else histories):
            row = {"nodes": n, "history": seconds}
            try:
                run = Path(tmp) / ("report-%d-%d" % (n, seconds))
                run.mkdir()
                os.link(metrics_files[seconds], run / "metrics.jsonl")
                nodes = [node_name(i) for i in range(n)]
                write_node_times(trainer_metrics, run / "node_times.json", nodes)
                (run / "facts.json").write_text(json.dumps(dict(
                    run_name="scale", straggler_threshold=0.2, cluster=dict(
                        partition="gpu", slurm_version="22.05.8", nodes=nodes, gpus_per_node=8, procs_per_node=8))))
                with Clock() as clock:
                    done = subprocess.run([sys.executable, "-c", REPORT_CALL, str(run)], env=collection_env(),
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                                          check=False)
                if done.returncode:
                    raise RuntimeError(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.returncode)
                row.update(wall_s=clock.wall, cpu_s=clock.children,
                           report_bytes=os.path.getsize(run / "report.md"))
            except Exception as err:
                row["error"] = not_measured(err)
            rows.append(row)
            if seconds == longest:
                shutil.rmtree(Path(tmp) / ("report-%d-%d" % (n, seconds)), ignore_errors=True)
    return dict(title="The run report (run_report.py)", rows=rows, time="wall_s", series=min(histories), columns=[
        ("history", "metrics.jsonl of", fmt_history), ("wall_s", "seconds", "%.2f"),
        ("cpu_s", "CPU s", "%.2f"), ("report_bytes", "report.md bytes", "%d")],
        note="A fresh Python process that calls write_report: Python's start-up, the imports and the plot included "
             "(the run role's action calls it in the task's process, which Ansible has started).")


def stage_resume(trainer_metrics, tmp, histories, metrics_files):
    """The trainer's MetricsLog on resuming from a checkpoint 30 minutes before the file's end."""
    rows = []
    for seconds in histories:
        row = {"nodes": TARGET, "history": seconds}
        try:
            path = Path(tmp) / "resume.jsonl"
            shutil.copyfile(metrics_files[seconds], path)
            with Clock() as clock:
                log = trainer_metrics.MetricsLog(path, max(1, seconds - 1800))
            log.file.close()
            row.update(wall_s=clock.wall, cpu_ms=1000 * clock.cpu, dropped=log.dropped)
            path.unlink()
        except Exception as err:
            row["error"] = not_measured(err)
        rows.append(row)
    return dict(title="Resuming the metrics file (the trainer's MetricsLog)", rows=rows, time=None, columns=[
        ("history", "metrics.jsonl of", fmt_history), ("wall_s", "seconds", "%.3f"), ("cpu_ms", "CPU ms", "%.1f"),
        ("dropped", "records dropped", "%d")],
        note="A resume from a checkpoint 30 minutes before the end: the records after it are dropped.")


def stage_diagnosis(tmp, sizes):
    """job_log.log_summary on the log of a job whose rank fails first among all others."""
    try:
        from scale_inputs import failure_log
    except ImportError as err:
        return dict(title="Failure diagnosis (job_log.log_summary)", rows=[], time=None, columns=[],
                    error=not_measured(err))
    rows = []
    for n in sizes:
        ranks = n * RANKS_PER_NODE
        first = ranks * 2 // 3 + 5
        row = {"nodes": n, "ranks": ranks}
        try:
            path = os.path.join(tmp, "job-%d.out" % n)
            row["log_bytes"] = failure_log(path, ranks, first)
            with Clock() as clock:
                summary = job_log.log_summary(path, tail=30)
            row.update(wall_s=clock.wall, cpu_s=clock.cpu, named="yes" if str(summary.get("failed_rank")) == str(first)
                       else "no (%s, not %d)" % (summary.get("failed_rank"), first))
            os.unlink(path)
        except Exception as err:
            row["error"] = not_measured(err)
        rows.append(row)
    return dict(title="Failure diagnosis (job_log.log_summary)", rows=rows, time="cpu_s", columns=[
        ("ranks", "ranks", lambda v: format(v, ",")), ("log_bytes", "log MB", lambda v: "%.1f" % (v / 1e6)),
        ("cpu_s", "CPU s", "%.2f"), ("named", "names the first failing rank", "%s")],
        note="The log (bench/scale_inputs.failure_log): one rank runs out of memory, every other rank then "
             "reports its lost peer or NCCL's watchdog, each node's launcher its summary.")


def stage_parse(sizes):
    """slurm_parse.parse_nodes on `scontrol show node -o` of N nodes."""
    rows = []
    for n in sizes:
        row = {"nodes": n}
        try:
            text = node_lines([node_name(i) for i in range(n)])
            with Clock() as clock:
                parsed = slurm_parse.parse_nodes(text)
            if len(parsed) != n:
                raise RuntimeError("%d nodes parsed of %d" % (len(parsed), n))
            row.update(cpu_ms=1000 * clock.cpu, text_bytes=len(text))
        except Exception as err:
            row["error"] = not_measured(err)
        rows.append(row)
    return dict(title="`scontrol show node` parsing (slurm_parse.parse_nodes)", rows=rows, time="cpu_ms", columns=[
        ("text_bytes", "scontrol output bytes", "%d"), ("cpu_ms", "CPU ms", "%.1f")])


def nccl_env_inventory(path, workspace, n):
    """N compute nodes, one in 100 with an HCA of its own: a hosts file like inventories/local."""
    lines = ["all:", "  children:", "    slurm_login:", "      hosts:", "        localhost:",
             "          ansible_connection: local",
             '          ansible_python_interpreter: "{{ ansible_playbook_python }}"', "    slurm_workers:", "      hosts:"]
    for i in range(n):
        lines.append("        %s:" % node_name(i))
        if i % 100 == 1:
            lines.append("          nccl_env_ib_hca: mlx5_%d:1" % (i % 4))
    lines += ["  vars:", "    slurm_nodes: %d" % n, "    slurm_gpus_per_node: 8", "    slurm_procs_per_node: 8",
              "    slurm_workspace: %s" % workspace, "    slurm_python: /usr/bin/python3",
              "    run_name: scale", "    nccl_env_socket_ifname: ib0", "    nccl_env_ib_hca: mlx5_0:1"]
    Path(path).write_text("\n".join(lines) + "\n")


def stage_nccl_env(tmp, sizes):
    """playbooks/nccl_env.yml (the nccl_env role alone) on an inventory of N hosts, twice."""
    rows = []
    playbook = ROOT / "playbooks" / "nccl_env.yml"
    empty = Path(tmp) / "empty.yml"  # Ansible's start-up and the inventory's parsing alone
    empty.write_text("- hosts: slurm_login\n  gather_facts: false\n  tasks: []\n")
    for n in [s for s in sizes if s <= TARGET] + [s for s in sizes if s > TARGET]:
        row = {"nodes": n}
        if n > TARGET and not any(r["nodes"] == TARGET and r.get("wall_s", NCCL_ENV_FAST_S) < NCCL_ENV_FAST_S
                                  for r in rows):
            row["error"] = "not measured: skipped, the stage took %d s or more at %d nodes" % (NCCL_ENV_FAST_S, TARGET)
            rows.append(row)
            continue
        try:
            inventory, workspace = Path(tmp) / ("hosts-%d.yml" % n), Path(tmp) / ("workspace-%d" % n)
            nccl_env_inventory(inventory, workspace, n)
            for key, play in (("wall_s", playbook), ("again_s", playbook), ("empty_s", empty)):
                with Clock() as clock:
                    done = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                                           str(play)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          universal_newlines=True, check=False)
                if done.returncode:
                    raise RuntimeError(done.stdout.strip()[-300:])
                row[key] = clock.wall
                row.setdefault("cpu_s", clock.children)  # of the first run, every process of it
            row["files"] = len(os.listdir(workspace / "scale" / "env"))
            shutil.rmtree(workspace)
        except Exception as err:
            row["error"] = not_measured(err)
        rows.append(row)
    return dict(title="The nccl_env stage (ansible-playbook playbooks/nccl_env.yml)", rows=rows, time="wall_s",
                columns=[("wall_s", "seconds", "%.1f"), ("cpu_s", "CPU s", "%.1f"),
                         ("again_s", "seconds again (nothing to write)", "%.1f"),
                         ("empty_s", "seconds of an empty play", "%.1f"), ("files", "env files", "%d")],
                note="Wall time of the whole command, Ansible's start-up included (an empty play on the same "
                     "inventory shows it), and the CPU time of all its processes, which others on the CPUs "
                     "disturb less; the stage includes the run role's input checks. One host in 100 has host vars "
                     "of its own.")


def stage_watch_coverage(histories, metrics_files, poll_rows):
    """Whether each poll sees every loss record written since the one before (the straggler rule needs them all)."""
    rows = []
    for seconds in histories:
        row = {"nodes": TARGET, "history": seconds}
        try:
            read = metrics.tail_records(metrics_files[seconds])[0]
            poll = [r for r in poll_rows if r["nodes"] == TARGET and r["history"] == seconds and "cpu_ms" in r]
            # records written between the starts of two polls: the wait, and the poll's own work, at one a second
            between = WATCH_POLL_S + math.ceil(poll[0]["cpu_ms"] / 1000.0) if poll else WATCH_POLL_S + 1
            steps = [r.get("step") for r in read]
            whole = steps == list(range(steps[-1] - len(steps) + 1, steps[-1] + 1)) if steps else False
            row.update(read=len(read), between=between, seen="yes" if whole and len(read) >= between else "no")
        except Exception as err:
            row["error"] = not_measured(err)
        rows.append(row)
    return dict(title="Loss records seen by the watch (metrics.tail_records, a record a second)", rows=rows,
                time=None, columns=[("history", "metrics.jsonl of", fmt_history),
                                    ("read", "records one poll reads", "%d"),
                                    ("between", "records written between polls", "%d"),
                                    ("seen", "every record seen", "%s")])


# ---------------------------------------------------------------------------------------------- output


def fmt_history(seconds):
    if seconds >= DAY:
        return "%g day%s" % (seconds / DAY, "" if seconds == DAY else "s")
    return "%g h" % (seconds / HOUR)


def exponent(points):
    """Slope of log(value) over log(nodes): between the two largest sizes, and fitted over all."""
    points = sorted((n, v) for n, v in points if v and v > 0)
    if len(points) < 2:
        return None, None
    (n1, v1), (n2, v2) = points[-2:]
    last = math.log(v2 / v1) / math.log(n2 / n1)
    xs, ys = [math.log(n) for n, _v in points], [math.log(v) for _n, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    fit = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return last, fit


def cell(fmt, value):
    if value is None:
        return "-"
    return fmt(value) if callable(fmt) else fmt % value


def stage_exponent(stage):
    """A stage's growth exponents (between the two largest sizes, over all) of its time column,
    over the rows of the history every size was measured with; (None, None) without them."""
    if stage.get("error") or not stage.get("time"):
        return None, None
    series = [r for r in stage["rows"] if stage["time"] in r and r.get("history") == stage.get("series")]
    return exponent([(r["nodes"], r[stage["time"]]) for r in series])


def fastest_growing(stages):
    """(title, exponent between the two largest sizes) of the stage whose cost grows fastest in
    nodes, None when no stage has an exponent."""
    grown = [(stage_exponent(stage)[0], stage["title"]) for stage in stages.values()]
    grown = [(last, title) for last, title in grown if last is not None]
    if not grown:
        return None
    last, title = max(grown)
    return title, last


def render_stage(stage):
    lines = ["### " + stage["title"], ""]
    if stage.get("error"):
        return lines + [stage["error"], ""]
    lines += ["| nodes | " + " | ".join(title for _key, title, _fmt in stage["columns"]) + " |",
              "|---:|" + "---:|" * len(stage["columns"])]
    for row in stage["rows"]:
        if "error" in row:
            lines.append("| %s | %s |" % (format(row["nodes"], ","), row["error"].replace("|", "/")))
            continue
        lines.append("| %s | %s |" % (format(row["nodes"], ","), " | ".join(
            cell(fmt, row.get(key)) for key, _title, fmt in stage["columns"])))
    if stage["time"]:
        # the rows of one history, the one every size was measured with
        last, fit = stage_exponent(stage)
        if last is not None:
            lines += ["", "Growth exponent of %s in nodes: %.2f between the two largest sizes, %.2f over all "
                      "(1 is linear)." % (dict((k, t) for k, t, _f in stage["columns"])[stage["time"]], last, fit)]
    if stage.get("note"):
        lines += ["", stage["note"]]
    return lines + [""]


def verdicts(stages):
    """(target, measured at TARGET nodes, ok) for each of the design's targets."""
    def at(name, key, **match):
        for row in stages[name]["rows"]:
            if row["nodes"] == TARGET and all(row.get(k) == v for k, v in match.items()):
                return row.get(key, row.get("error", "not measured"))
        return "not measured (size %d not run)" % TARGET

    def judged(value, limit, fmt):
        if isinstance(value, (int, float)):
            return fmt % value, value <= limit
        return value, None
    week = max(r.get("history", 0) for r in stages["resume"]["rows"]) if stages["resume"]["rows"] else None
    longest = "metrics.jsonl of %s" % fmt_history(week) if week else "-"
    seen = at("coverage", "seen", history=week)
    named = at("diagnosis", "named")
    out = [("every loss record seen by the watch, %s" % longest, seen, seen == "yes" if seen in ("yes", "no")
            else None)]
    out.append(("a loss record <= 1 KB",) + judged(at("record", "record_bytes"), TARGETS["record_bytes"], "%d bytes"))
    out.append(("one poll <= 50 ms of module CPU, %s" % longest,)
               + judged(at("poll", "cpu_ms", history=week), TARGETS["poll_cpu_ms"], "%.1f ms"))
    out.append(("one poll's result <= 16 KB",)
               + judged(at("poll", "result_bytes", history=week), TARGETS["poll_result_bytes"], "%d bytes"))
    out.append(("the nccl_env stage <= 10 s",) + judged(at("nccl_env", "wall_s"), TARGETS["nccl_env_s"], "%.1f s"))
    out.append(("the run report <= 30 s, %s" % longest,)
               + judged(at("report", "wall_s", history=week), TARGETS["report_s"], "%.1f s"))
    out.append(("resume reading <= 1 s, %s" % longest,)
               + judged(at("resume", "wall_s", history=week), TARGETS["resume_s"], "%.3f s"))
    out.append(("failure diagnosis names the first failing rank among %s" % format(TARGET * RANKS_PER_NODE, ","),
                named,
                named == "yes" if isinstance(named, str) and not named.startswith("not") else None))
    return out


def render(result, form):
    if form == "json":
        return json.dumps(result, indent=1, default=str)
    stages = result["stages"]
    lines = ["Node counts %s, %d ranks a node; metrics files of %s at a loss record a second; %d CPU(s). "
             "Times are of this machine's CPUs; the growth exponents say how each cost grows." % (
                 ", ".join(format(n, ",") for n in result["sizes"]), RANKS_PER_NODE,
                 ", ".join(fmt_history(s) for s in result["histories"]), os.cpu_count()), ""]
    lines += ["| target at %s nodes | measured | verdict |" % format(TARGET, ","), "|---|---|---|"]
    for target, value, ok in verdicts(stages):
        lines.append("| %s | %s | %s |" % (target, str(value).replace("|", "/"),
                                           "-" if ok is None else "met" if ok else "MISSED"))
    fastest = fastest_growing(stages)
    if fastest:
        lines += ["", "Fastest-growing in nodes: %s, growth exponent %.2f between the two largest sizes (1 is "
                  "linear); each stage's is under its table." % fastest]
    lines.append("")
    for name in ("record", "coverage", "poll", "report", "resume", "diagnosis", "parse", "nccl_env"):
        lines += render_stage(stages[name])
    text = "\n".join(lines).rstrip()
    return text if form == "markdown" else text.replace("### ", "")


def measure(args):
    from trainer import metrics as trainer_metrics
    sizes, histories = args.sizes, sorted({min(HOUR, args.days * DAY), min(DAY, args.days * DAY), args.days * DAY})
    histories = sorted({int(h) for h in histories})
    stages = {}
    with tempfile.TemporaryDirectory(prefix="llmtrain-scale-") as tmp:
        metrics_files = {}
        record = loss_record(trainer_metrics, [node_name(i) for i in range(TARGET)])
        for seconds in histories:
            metrics_files[seconds] = os.path.join(tmp, "metrics-%d.jsonl" % seconds)
            write_metrics(metrics_files[seconds], record, seconds)

        def guarded(name, fn, *fargs):
            print("scale_bench: %s ..." % name, file=sys.stderr, flush=True)
            try:
                stages[name] = fn(*fargs)
            except Exception as err:  # a whole stage mid-change: said, the others go on
                traceback.print_exc()
                stages[name] = dict(title=name, rows=[], time=None, columns=[], error=not_measured(err))
        guarded("record", stage_record, trainer_metrics, sizes)
        guarded("poll", stage_poll, tmp, sizes, histories, metrics_files)
        guarded("coverage", stage_watch_coverage, histories, metrics_files, stages["poll"]["rows"])
        guarded("report", stage_report, trainer_metrics, tmp, sizes, histories, metrics_files)
        guarded("resume", stage_resume, trainer_metrics, tmp, histories, metrics_files)
        guarded("diagnosis", stage_diagnosis, tmp, sizes)
        guarded("parse", stage_parse, sizes)
        if not args.skip_nccl_env:
            guarded("nccl_env", stage_nccl_env, tmp, sizes)
        else:
            stages["nccl_env"] = dict(title="The nccl_env stage", rows=[], time=None, columns=[],
                                      error="not measured: --skip-nccl-env")
    return dict(sizes=sizes, histories=histories, stages=stages)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    p.add_argument("--sizes", type=lambda text: sorted({int(n) for n in text.split(",")}), default=SIZES,
                   help="node counts (default %s); the targets are judged at %d" % (",".join(map(str, SIZES)), TARGET))
    p.add_argument("--days", type=float, default=7.0, help="the longest metrics history, in days (default 7)")
    p.add_argument("--skip-nccl-env", action="store_true", help="leave out the ansible-playbook stage")
    p.add_argument("--format", choices=("text", "json", "markdown"), default="text")
    args = p.parse_args(argv)
    print(render(measure(args), args.format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
