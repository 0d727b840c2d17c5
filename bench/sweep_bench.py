"""A sweep of 10 to 1,000 members: its submission and one poll of its watch, on this machine.

    python bench/sweep_bench.py                          # text
    python bench/sweep_bench.py --format markdown        # a section for docs/benchmarks.md
    python bench/sweep_bench.py --sizes 10,100           # a quick run

For each size, in a temporary workspace that holds a sweep's run directory as the deploy stage
leaves it (the real check scripts, node package and reference trainer; env files): the action's
work on the controller (the members from a grid, each member's settings checked as the run's
variables, each member's training job made: plugins/action/sweep.py), then the module's
(plugins/modules/sweep.py, in this process as AnsiballZ runs it: every member's run directory
checked and made, the sweep's files linked in, its job script written, one array submitted),
then one poll of the watch (the action's part: the members and their jobs' options, no scripts;
the module's, state=status: the members' done records, the queue, each member's metrics tail).
sbatch, squeue and scontrol are shell scripts that answer as Slurm 22.05 does (the array's id;
its tasks pending; MaxArraySize 1001). The targets, at 1,000 members: submitted in at most 5 s,
a poll in at most 200 ms.
"""

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "tests" / "unit" / "jobs"), str(ROOT / "bench")]

import golden  # noqa: E402  the roles' defaults, as the golden job scripts take them
from scale_bench import Clock  # noqa: E402  CPU and wall seconds of a block, as the scale bench times them
from ansible_collections.llmtrain.slurm.plugins.action import run_dirs, sweep as sweep_action  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.jobs.sweep import Sweep  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import node_package  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import members  # noqa: E402
from ansible_collections.llmtrain.slurm.plugins.modules import sweep as sweep_module  # noqa: E402

SIZES = [10, 100, 1000]
TARGET = 1000
TARGETS = {"submit_s": 5.0, "poll_ms": 200.0}
ARRAY = 4242
POLL_RUNS = 3


def fake_slurm(directory, members_count):
    """sbatch prints the array's id; squeue lists its tasks pending; scontrol says MaxArraySize."""
    bin_dir = Path(directory) / "bin"
    bin_dir.mkdir()
    scripts = {
        "sbatch": "cat > /dev/null\necho %d\n" % ARRAY,
        "squeue": "printf '%d_[0-%d%%%%10]\\037PENDING\\037llmtrain-sweep-bench\\037(null)\\036\\n'\n"
                  % (ARRAY, members_count - 1),
        "scontrol": 'case "$1 $2" in\n"show config") echo "MaxArraySize            = 1001" ;;\n'
                    '*) echo "unexpected: $*" >&2; exit 1 ;;\nesac\n',
    }
    for name, body in scripts.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body)
        (bin_dir / name).chmod(0o755)
    return bin_dir


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


def run_module(args):
    from ansible.module_utils.testing import patch_module_args
    out = io.StringIO()
    with patch_module_args(args), contextlib.redirect_stdout(out), Clock() as clock:
        try:
            sweep_module.main()
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


def measure(size):
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
    return row


COLUMNS = [("members", "members", "%d"), ("action_s", "action s (members, checks, jobs)", "%.2f"),
           ("module_s", "module s (dirs, links, one sbatch)", "%.2f"), ("submit_s", "submitted in s", "%.2f"),
           ("args_mb", "module arguments MB", "%.1f"), ("files", "member files", "%d"),
           ("poll_ms", "a poll ms", "%.0f"), ("poll_action_ms", "of it the action's ms", "%.0f"),
           ("result_kb", "poll result KiB", "%.0f")]


def table(rows, markdown):
    head = [title for _key, title, _fmt in COLUMNS]
    lines = []
    for row in rows:
        if row.get("error"):
            lines.append([str(row["members"]), row["error"]] + [""] * (len(COLUMNS) - 2))
        else:
            lines.append([fmt % row[key] for key, _title, fmt in COLUMNS])
    if markdown:
        return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(line) + " |" for line in lines])
    return "\n".join("  ".join(cells) for cells in [head] + lines)


def verdict(rows):
    row = next((r for r in rows if r["members"] == TARGET and not r.get("error")), None)
    if row is None:
        return "At %d members: not measured." % TARGET
    said = []
    for key, what, unit in (("submit_s", "submitted", "s"), ("poll_ms", "a poll", "ms")):
        ok = row[key] <= TARGETS[key]
        said.append("%s in %.2f %s against at most %g %s: %s" % (what, row[key], unit, TARGETS[key], unit, "met" if ok else "missed"))
    return "At %d members: %s." % (TARGET, "; ".join(said))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in SIZES))
    parser.add_argument("--format", choices=["text", "markdown"], default="text")
    args = parser.parse_args(argv)
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        try:
            rows.append(measure(size))
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
              "member's run directory is 11 directories and its files hard links to the sweep's. status.yml does "
              "not show sweeps yet: its figure at 1,000 members is not measured." % POLL_RUNS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
