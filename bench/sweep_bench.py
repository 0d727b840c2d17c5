"""A sweep of 10 to 1,000 members: its submission, one poll of its watch and status.yml's table of it, on this machine.

    python bench/sweep_bench.py                          # text
    python bench/sweep_bench.py --format markdown        # a section for docs/benchmarks.md
    python bench/sweep_bench.py --sizes 10,100           # a quick run
    python bench/sweep_bench.py --no-playbook            # without ansible-playbook playbooks/status.yml

For each size, in a temporary workspace that holds a sweep's run directory as the deploy stage
leaves it (the real check scripts, node package and reference trainer; env files): the action's
work on the controller (the members from a grid, each member's settings checked as the run's
variables, each member's training job made: plugins/action/sweep.py), then the module's
(plugins/modules/sweep.py, in this process as AnsiballZ runs it: every member's run directory
checked and made, the sweep's files linked in, its job script written, one array submitted),
then one poll of the watch (the action's part: the members and their jobs' options, no scripts;
the module's, state=status: the members' done records, the queue, each member's metrics tail).
Then status.yml's work once the sweep has trained a while (most members done, some failed, a task
per sweep_parallel running, the rest pending; each member that started with a metrics.jsonl of up to
a few hundred records as the reference trainer writes them, and its done record as its array task
and its end leave it): the run_status module (plugins/modules/run_status.py, in this process) for
the whole table, where the sweep is one row, and with sweep=NAME, its member table; and, once a size,
`ansible-playbook playbooks/status.yml -e sweep=NAME` against the same workspace, ansible-playbook's
start included. sbatch, squeue, scontrol and sacct are shell scripts that answer as Slurm 22.05 does
(the array's id; its tasks pending, or running and pending; MaxArraySize 1001; sacct as a cluster
without accounting answers). The targets, at 1,000 members: submitted in at most 5 s, a poll in at
most 200 ms, status.yml's module in at most 2 s (the whole table, and the member table).
"""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "tests" / "unit" / "jobs"), str(ROOT / "bench")]

import golden  # noqa: E402  the roles' defaults, as the golden job scripts take them
from scale_bench import Clock  # noqa: E402  CPU and wall seconds of a block, as the scale bench times them
from ansible_collections.llmtrain.slurm.plugins.action import run_dirs, sweep as sweep_action  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.sweep import RECORD, Sweep  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import node_package, run_status  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import FIELD_SEP, RECORD_SEP  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import members  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.state import read_record  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.modules import run_status as status_module, sweep as sweep_module  # noqa: E402

SIZES = [10, 100, 1000]
TARGET = 1000
TARGETS = {"submit_s": 5.0, "poll_ms": 200.0, "status_ms": 2000.0, "status_sweep_ms": 2000.0}
ARRAY = 4242
POLL_RUNS = 3
STATUS_RUNS = 3
PARALLEL = 10
# a member's training as the reference trainer records it: a loss record every METRICS_EVERY steps of
# TOTAL_STEPS, a checkpoint event every CHECKPOINT_EVERY (300 records and a few events, about 70 KB)
TOTAL_STEPS = 3000
METRICS_EVERY = 10
CHECKPOINT_EVERY = 1000
BIN = Path(sys.executable).parent


def fake_slurm(directory, members_count):
    """sbatch prints the array's id; squeue lists its tasks pending (the status's query, in its own
    format: what queue.txt beside it holds); scontrol says MaxArraySize; sacct answers as a cluster
    without accounting does (and leaves sacct.called beside it)."""
    bin_dir = Path(directory) / "bin"
    bin_dir.mkdir()
    scripts = {
        "sbatch": "cat > /dev/null\necho %d\n" % ARRAY,
        "squeue": 'case "$*" in\n*%%E*) cat "${0%%/*}/queue.txt" ;;\n'
                  "*) printf '%d_[0-%d%%%%10]\\037PENDING\\037llmtrain-sweep-bench\\037(null)\\036\\n' ;;\nesac\n"
                  % (ARRAY, members_count - 1),
        "scontrol": 'case "$1 $2" in\n"show config") echo "MaxArraySize            = 1001" ;;\n'
                    '*) echo "unexpected: $*" >&2; exit 1 ;;\nesac\n',
        "sacct": ': > "${0%/*}/sacct.called"\necho "Slurm accounting storage is disabled" >&2\nexit 1\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "queue.txt").write_text(queue_text([], [range(members_count)]))
    return bin_dir


def queue_text(running, pending):
    """squeue's answer in the status's format (QUEUE_FORMAT) of the array's running tasks (indices)
    and its pending ones (ranges of indices, one line each as squeue folds them)."""
    rows = [["%d_%d" % (ARRAY, index), "RUNNING", "llmtrain-sweep-bench", "None", "1", "node-%d" % (index % 64),
             "2026-12-07T10:00:00", "(null)"] for index in running]
    rows += [["%d_[%d-%d%%%d]" % (ARRAY, span[0], span[-1], PARALLEL), "PENDING", "llmtrain-sweep-bench",
              "JobArrayTaskLimit", "1", "", "N/A", "(null)"] for span in pending if len(span)]
    return "".join(FIELD_SEP.join(row) + RECORD_SEP + "\n" for row in rows)


def metrics_text(records, seed, ended):
    """A member's metrics.jsonl as the reference trainer writes it: its start event, a loss record
    every METRICS_EVERY steps up to `records` of them, a checkpoint event every CHECKPOINT_EVERY
    steps and, ended, the done event. The loss falls from 10.8, to a floor of the member's (seed)."""
    floor = 2.5 + (seed * 7919 % 1000) / 1000.0
    lines = ['{"event": "start", "step": 0, "params": 124439808, "tokens_per_step": 524288}']
    for number in range(1, records + 1):
        step = number * METRICS_EVERY
        loss = floor + (10.8 - floor) * (1.0 - step / TOTAL_STEPS) ** 3
        lines.append('{"step": %d, "total_steps": %d, "loss": %.4f, "lr": %.3e, "grad_norm": %.4f, "tokens_seen": %d, '
                     '"tokens_per_s": %.1f, "elapsed_s": %.3f, "eta_s": %.1f}'
                     % (step, TOTAL_STEPS, loss, 6e-4 * (1 - step / TOTAL_STEPS) + 6e-5, 0.9 + (step % 7) / 10.0,
                        step * 524288, 412345.6 + step % 97, step * 1.27, (TOTAL_STEPS - step) * 1.27))
        if step % CHECKPOINT_EVERY == 0:
            lines.append('{"event": "checkpoint", "step": %d, "path": "checkpoints/step_%06d.pt"}' % (step, step))
    if ended:
        lines.append('{"event": "done", "step": %d, "tokens_seen": %d, "elapsed_s": %.3f}'
                     % (TOTAL_STEPS, TOTAL_STEPS * 524288, TOTAL_STEPS * 1.27))
    return "\n".join(lines) + "\n"


def trained(workspace, bin_dir, size):
    """The sweep some hours later: its tasks in index order, the first 80 % done (the whole metrics
    file, the done record marked COMPLETED at the task's end), 5 % failed (part of it, the record its
    array task wrote), PARALLEL running (half of it, that record), the rest pending (nothing yet); the
    queue says so (queue.txt). {state: how many members}."""
    arrays = read_record(Path(workspace) / "bench" / RECORD)
    tasks = sorted((int(index), name) for entry in arrays for index, name in entry["tasks"].items())
    done, failed = size * 8 // 10, size // 20
    running = min(PARALLEL, size - done - failed)
    for index, name in tasks:
        run_dir = Path(workspace) / name
        state = ("done" if index < done else "failed" if index < done + failed else
                 "running" if index < done + failed + running else "pending")
        if state == "pending":
            continue
        records = {"done": TOTAL_STEPS // METRICS_EVERY, "failed": 120 - index % 5, "running": 150}[state]
        (run_dir / "metrics.jsonl").write_text(metrics_text(records, index, state == "done"))
        record = {"fingerprint": "sweep:%d" % ARRAY, "job_id": "%d_%d" % (ARRAY, index), "name": "llmtrain-" + name,
                  "state": "RUNNING"}
        if state == "done":
            record.update(state="COMPLETED", exit_code="0:0", end_time="2026-12-07T12:00:00")
        (run_dir / "train.done.json").write_text(json.dumps(record, sort_keys=True) + "\n")
    first = done + failed + running
    (bin_dir / "queue.txt").write_text(queue_text(range(done + failed, first), [range(first, size)]))
    return dict(done=done, failed=failed, running=running, pending=size - first)


def sweep_dir(workspace):
    """The sweep's run directory as the preflight, nccl_env and deploy stages leave it."""
    base = Path(workspace) / "bench"
    files = run_dirs.check_sources()
    files.update(node_package.files("scripts/"))
    files.update({"env/cluster.env": "export NCCL_DEBUG=WARN\n", "scripts/node_check.conf": "# the sweep's\n"})
    for name, text in files.items():
        path = base / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (base / "data").mkdir()
    return base, len(files)


def run_module(args, main=sweep_module.main):
    from ansible.module_utils.testing import patch_module_args
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), Clock() as clock:
        try:
            main()
        except SystemExit:
            pass
    result = json.loads(out.getvalue())
    if result.get("failed"):
        raise RuntimeError(result.get("msg"))
    return result, clock, len(out.getvalue())


def grid(size):
    """A learning-rate ladder over batch sizes with `size` members."""
    rates = max(1, size // 10)
    return {"pretrain_learning_rate": [round(1e-4 * (index + 1), 6) for index in range(rates)],
            "pretrain_batch_size": list(range(1, size // rates + 1))}


def measure(size, playbook=True):
    row = {"members": size}
    with tempfile.TemporaryDirectory() as tmp:
        base, shared = sweep_dir(tmp)
        values = dict(golden.variables("ours"), slurm_workspace=tmp, run_name="bench", slurm_nodes=1)
        known = sweep_action.known_variables()
        with Clock() as action:
            found, errors = members({"name": "bench", "grid": grid(size)}, known, values)
            errors += sweep_action.member_errors(found, values)
            args = Sweep(values, found, 10).module_args()
        if errors or len(found) != size:
            raise RuntimeError("; ".join(errors[:3]) or "%d members" % len(found))
        bin_dir = fake_slurm(tmp, size)
        path = os.environ["PATH"]
        os.environ["PATH"] = "%s:%s" % (bin_dir, path)
        try:
            submitted, module, _size = run_module(dict(args, state="present"))
            if [a["job_id"] for a in submitted["submitted"]] != [str(ARRAY)]:
                raise RuntimeError("submitted %r" % submitted["submitted"])
            polls = []
            for _run in range(POLL_RUNS):  # the action's part of a poll (no member checks, no scripts), then the module's
                with Clock() as making:
                    found_again, _errors = members({"name": "bench", "grid": grid(size)}, known, values)
                    poll_args = dict(Sweep(values, found_again, 10).module_args(files=False), state="status")
                result, clock, result_bytes = run_module(poll_args)
                polls.append((result, making, clock, result_bytes))
        finally:
            os.environ["PATH"] = path
        result, making, poll, result_bytes = min(polls, key=lambda found_poll: found_poll[1].wall + found_poll[2].wall)
        if result["counts"]["pending"] != size:
            raise RuntimeError("the poll found %r" % result["counts"])
        row.update(action_s=action.wall, module_s=module.wall, submit_s=action.wall + module.wall,
                   args_mb=len(json.dumps(args)) / 1e6, files=size * (shared + 2), poll_ms=1000 * (making.wall + poll.wall),
                   poll_action_ms=1000 * making.wall, result_kb=result_bytes / 1024.0)
        row.update(status(tmp, bin_dir, size, playbook))
    return row


def status(workspace, bin_dir, size, playbook):
    """status.yml's work once the sweep has trained a while (trained): the run_status module in this
    process for the whole table and with sweep=NAME (the least of STATUS_RUNS each), each checked
    against what the members' files and the queue say; with playbook, the whole of
    `ansible-playbook playbooks/status.yml -e sweep=NAME` once."""
    counts = trained(workspace, bin_dir, size)
    states = [state for state in ("done", "running", "pending", "failed") if counts[state]]
    said = "%d members: %s" % (size, ", ".join("%d %s" % (counts[state], state) for state in states))
    path = os.environ["PATH"]
    os.environ["PATH"] = "%s:%s" % (bin_dir, path)
    figures = {}
    try:
        for key, sweep in (("status_ms", None), ("status_sweep_ms", "bench")):
            runs = []
            for _run in range(STATUS_RUNS):
                args = dict(workspace=workspace, log_lines=0, job_prefix="llmtrain-", progress_regex=[])
                result, clock, result_bytes = run_module(dict(args, sweep=sweep) if sweep else args, status_module.main)
                runs.append((clock.wall, result_bytes, result))
            wall, result_bytes, result = min(runs, key=lambda run: run[0])
            rows = [r for r in result["runs"] if r["run"] == "bench"]
            if [r["state"] for r in result["runs"]] != ["sweep"] or rows[0]["why"] != said:
                raise RuntimeError("the status found %r" % [(r["run"], r["state"], r["why"]) for r in result["runs"]])
            if sweep and (len(result["sweep"]["members"]) != size or len(result["sweep"]["table"]) != size + 2):
                raise RuntimeError("the member table has %d lines" % len(result["sweep"]["table"]))
            figures[key], figures[key.replace("_ms", "_kb")] = 1000 * wall, result_bytes / 1024.0
    finally:
        os.environ["PATH"] = path
    figures["sacct_asked"] = (bin_dir / "sacct.called").exists()
    figures["playbook_s"] = min(playbook_seconds(workspace, bin_dir) for _run in range(STATUS_RUNS)) if playbook else None
    return figures


def playbook_seconds(workspace, bin_dir):
    """Wall seconds of `ansible-playbook playbooks/status.yml -e sweep=bench` on the workspace, its
    Slurm commands the fake ones (slurm_client_env, as the local inventory gives the local cluster's)."""
    values = {"slurm_workspace": workspace, "sweep": "bench",
              "slurm_client_env": {"PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}}
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    started = time.perf_counter()
    done = subprocess.run([str(BIN / "ansible-playbook"), "playbooks/status.yml", "-e", json.dumps(values)], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0 or "lowest loss" not in done.stdout or "member" not in done.stdout:
        raise RuntimeError("status.yml failed (rc %d): %s" % (done.returncode, done.stdout[-400:]))
    return wall


COLUMNS = [("members", "members", "%d"), ("action_s", "action s (members, checks, jobs)", "%.2f"),
           ("module_s", "module s (dirs, links, one sbatch)", "%.2f"), ("submit_s", "submitted in s", "%.2f"),
           ("args_mb", "module arguments MB", "%.1f"), ("files", "member files", "%d"),
           ("poll_ms", "a poll ms", "%.0f"), ("poll_action_ms", "of it the action's ms", "%.0f"),
           ("result_kb", "poll result KiB", "%.0f"), ("status_ms", "status.yml's module ms (the table)", "%.0f"),
           ("status_sweep_ms", "with sweep=NAME ms (the members)", "%.0f"), ("status_sweep_kb", "its result KiB", "%.0f"),
           ("playbook_s", "ansible-playbook status.yml -e sweep=NAME s", "%.2f")]


def table(rows, markdown):
    head = [title for _key, title, _fmt in COLUMNS]
    lines = []
    for row in rows:
        if row.get("error"):
            lines.append([str(row["members"]), row["error"]] + [""] * (len(COLUMNS) - 2))
        else:
            lines.append(["-" if row.get(key) is None else fmt % row[key] for key, _title, fmt in COLUMNS])
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(line) + " |" for line in lines])
    return "\n".join("  ".join(cells) for cells in [head] + lines)


def verdict(rows):
    row = next((r for r in rows if r["members"] == TARGET and not r.get("error")), None)
    if row is None:
        return "At %d members: not measured." % TARGET
    said = []
    for key, what, unit in (("submit_s", "submitted", "s"), ("poll_ms", "a poll", "ms"),
                            ("status_ms", "status.yml's module (the table)", "ms"), ("status_sweep_ms", "with sweep=NAME", "ms")):
        ok = row[key] <= TARGETS[key]
        said.append("%s in %.2f %s against at most %g %s: %s" % (what, row[key], unit, TARGETS[key], unit, "met" if ok else "missed"))
    return "At %d members: %s." % (TARGET, "; ".join(said))


def status_note(rows):
    """What the status columns are, and whether sacct was asked."""
    sacct = ("sacct was asked (it answered as a cluster without accounting does)." if any(row.get("sacct_asked") for row in rows) else
             "sacct is not asked: the workspace holds the sweep alone, and a sweep's row and its members' hold no hours (the "
             "status asks sacct for the runs' jobs only), so the figure is the same with accounting or without.")
    return ("status.yml's module is plugins/modules/run_status.py in this process, once the sweep has trained a while: "
            "80 %% of its members done (a metrics.jsonl of %d loss records and its events, about 70 KB, and the done "
            "record their array task wrote and its end marked completed), 5 %% failed and %d running (part of that "
            "file, the record their task wrote), the rest pending; squeue lists the running tasks and the pending "
            "ones as Slurm folds them. The table is the whole status table (the sweep one row); with sweep=NAME the "
            "module adds every member's row and the member table to its result (the column after it). Each the "
            "least of %d. Per member it reads bounded pieces only, whatever the member's history: the lstat of its "
            "directories, its done record, the last %d records of its metrics file (%d KiB), and its STOP where it is "
            "neither done nor queued; the queue once, the workspace listed once. %s The last column is the whole of "
            "`ansible-playbook playbooks/status.yml -e sweep=NAME` against the same workspace (the local "
            "inventory, the fake commands first on its PATH through slurm_client_env), the least of %d: most of it "
            "is ansible-playbook's own start, which the row of the fewest members shows; the 2 s target is the "
            "module's." % (TOTAL_STEPS // METRICS_EVERY, PARALLEL, STATUS_RUNS, run_status.MEMBER_RECORDS,
                           run_status.MEMBER_TAIL_BYTES // 1024, sacct, STATUS_RUNS))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    parser.add_argument("--no-playbook", action="store_true", help="leave out ansible-playbook playbooks/status.yml")
    args = parser.parse_args(argv)
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        try:
            rows.append(measure(size, playbook=not args.no_playbook))
        except Exception as err:  # said, not fatal: the other sizes go on
            rows.append({"members": size, "error": "not measured: %s" % " ".join(str(err).split())[:160]})
    markdown = args.format == "markdown"
    print(table(rows, markdown))
    print()
    print(verdict(rows))
    if markdown:
        print()
        print("The action's work on the controller and the module's on the login node (here the same machine), "
              "each in this process, without what ansible-playbook adds to a task (its start, and moving the "
              "module's arguments: the column above); a poll is the least of %d. Slurm's commands are shell "
              "scripts that answer as Slurm 22.05 does; the workspace is this machine's local disk, where each "
              "member's run directory is 11 directories and its files hard links to the sweep's." % POLL_RUNS)
        print()
        print(status_note(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
