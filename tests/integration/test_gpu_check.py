"""What Slurm registers against what the nodes detect, on the local cluster: honest zero
GPUs match; placeholder GRES (gpu:2 backed by regular files) is a mismatch that report
mode lists and strict mode fails on, naming every node - in slurm_gpu_check and in the
node check (node_check.yml, the same check every job starts with), which preflight, asking
Slurm only, cannot see. A node whose nvidia-smi reports a GPU fault is named with it."""

import json
import os
import re
import sys

from cluster import NODE_RE, NODES, ROOT, module, node, run_playbook, slurm

FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures")


def replay_nvidia_smi(tmp_path):
    """A directory whose nvidia-smi prints what a real one printed on a GPU node (the recorded
    outputs in tests/unit/fixtures): the query's CSV, and `-q` of a GPU with a row remapping
    pending. Only the outputs are replayed; everything that reads them is the project's."""
    folder = tmp_path / "replay"
    folder.mkdir()
    script = folder / "nvidia-smi"
    script.write_text("#!/bin/sh\ncase \"$1\" in\n  -q) exec cat %s ;;\n  *) exec cat %s ;;\nesac\n" % (
        os.path.join(FIXTURES, "gpu_health", "a10_q_remapped_rows_pending.txt"),
        os.path.join(FIXTURES, "nvidia_smi", "h200.csv")))
    script.chmod(0o755)
    os.chmod(str(tmp_path), 0o755)
    return str(folder)


def check(tmp_path, **args):
    return module("slurm_gpu_check", dict(dict(partition="debug", python=sys.executable), **args), tmp_path)


def test_cpu_nodes_register_and_detect_zero(local_cluster, tmp_path):
    result = check(tmp_path)
    assert not result["failed"], result["_output"]
    assert [r["name"] for r in result["nodes"]] == NODES
    assert all(r["registered"] == 0 and r["detected"] == 0 and r["match"] for r in result["nodes"])
    assert result["mismatches"] == []
    assert result["cmd"].count("--nodelist=" + ",".join(NODES)) == 1  # one srun for all nodes


def test_placeholder_gres_is_a_mismatch_on_every_node(local_cluster, tmp_path):
    try:
        # typed, as most sites register them (gpu:TYPE:N); an untyped request (--gres=gpu:2) takes them too
        run_playbook("local_cluster.yml", "-e", "local_cluster_gres_gpus=2", "-e", "local_cluster_gres_gpu_type=tiny")
        report = check(tmp_path, mode="report")
        assert not report["failed"], report["_output"]
        assert report["mismatches"] == NODES
        for row in report["nodes"]:
            assert row["registered"] == 2 and row["nvidia_smi_count"] == 0 and row["torch_count"] == 0
            assert row["reason"].startswith("Slurm registers gpu:2, the node detects 0 (nvidia-smi not found")
        assert "--gres=gpu:2" in report["cmd"]

        strict = check(tmp_path, mode="strict")
        assert strict["failed"]
        lines = strict["msg"].splitlines()
        assert lines[0] == "GPU check failed on 3 of 3 node(s):"
        for name, line in zip(NODES, lines[1:]):
            assert line.startswith(name + ": Slurm registers gpu:2, the node detects 0")
            assert "Likely fix:" in line and "Gres=gpu:0 for NodeName=" + name in line

        assert run_playbook("preflight.yml").rc == 0  # Slurm registers the GPUs: only a node can tell
        # a run that asks for typed GPUs: the type the nodes register passes, another is refused naming it
        typed = ["-e", "slurm_gpus_per_node=2", "-e", "slurm_procs_per_node=1"]
        assert run_playbook("preflight.yml", *typed, "-e", "slurm_gpu_type=tiny").rc == 0
        wrong = run_playbook("preflight.yml", *typed, "-e", "slurm_gpu_type=h100", check=False)
        assert wrong.rc != 0
        assert ("slurm_gpu_type=h100: no usable node of partition debug registers GPUs of that type; they register "
                "gpu:tiny (3 nodes).") in wrong.output, wrong.output[-3000:]
        survey = run_playbook("node_check.yml", check=False)
        assert survey.rc != 0
        for name in NODES:
            assert "%s: Slurm registers gpu:2, the node detects 0" % name in survey.output, survey.output[-3000:]
        # the survey's step asks for the GPUs by type (--gres=gpu:tiny:2): Slurm takes it, and each node is shown
        typed_survey = run_playbook("node_check.yml", "-e", "run_gpu_policy=report", *typed, "-e", "slurm_gpu_type=tiny")
        typed_rows = [line.split() for line in re.findall(r'"(%s[^"]*)"' % NODE_RE, typed_survey.output)]
        assert [row[1].split("/")[0] for row in typed_rows] == ["2"] * 3, typed_survey.output[-3000:]
        # a node whose nvidia-smi answers as a recorded A10 with a row remapping pending did (the
        # query lists 1 GPU, -q the pending remapping): its GPU health is FAULTY and the fault named;
        # the kernel log is the node's own, and DCGM is not installed (a note, not a fault)
        replay = replay_nvidia_smi(tmp_path)
        faulty = run_playbook("node_check.yml", *typed, "-e", "slurm_gpu_type=tiny", "-e", "run_gpu_diag=1", "-e",
                              json.dumps(dict(slurm_env_setup=["export PATH=%s:$PATH" % replay])), check=False)
        assert faulty.rc != 0
        for name in NODES:
            assert ("GPU fault on %s: GPU 0 (00000000:07:00.0): a row remapping is pending: reset the GPU" % name
                    in faulty.output), faulty.output[-3000:]
        # the table's rows (the failure's lines name the nodes too): GPUs asked/seen by the step (the
        # placeholder GRES set no CUDA_VISIBLE_DEVICES)/nvidia-smi/torch/Slurm, ..., GPU HEALTH, VERDICT
        faulty_rows = [line.split() for line in re.findall(r'"(%s +\d+/[^"]*)"' % NODE_RE, faulty.output)]
        assert [(row[1], row[-2], row[-1]) for row in faulty_rows] == [("2/0/1/0/2", "FAULTY", "BAD")] * 3, faulty.output[-3000:]
        shown = run_playbook("node_check.yml", "-e", "run_gpu_policy=report")
        rows = [line.split() for line in re.findall(r'"(%s[^"]*)"' % NODE_RE, shown.output)]
        # GPUs asked/seen by the step/nvidia-smi/torch/registered by Slurm
        assert [row[1] for row in rows] == ["0/0/0/0/2"] * 3, shown.output[-3000:]

        slurm("scontrol", "update", "nodename=" + node(1), "state=drain", "reason=bad gres.conf")
        drained = check(tmp_path)
        row = [r for r in drained["nodes"] if r["name"] == node(1)][0]
        assert row["detected"] is None and row["reason"].startswith("node is IDLE+DRAIN: bad gres.conf")
        assert "--nodelist=%s,%s" % (node(0), node(2)) in drained["cmd"]
        survey = run_playbook("node_check.yml", "-e", "run_gpu_policy=report")
        assert '"%s  not checked: IDLE+DRAIN (bad gres.conf' % node(1) in survey.output, survey.output[-3000:]
    finally:
        run_playbook("local_cluster.yml")
