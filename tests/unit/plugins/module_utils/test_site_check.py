"""What a site requires of a job, against what Slurm has: the parsers on recorded Slurm 22.05
output (scontrol show reservation -o and sacctmgr's answer where there is no accounting, both
recorded on the local cluster), and the checks' messages."""

import os

from ansible_collections.llmtrain.slurm.plugins.filter import preflight
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import site_check
from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.slurm_parse import (
    NO_ACCOUNTING_MARKER, parse_associations, parse_gres, parse_reservations)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "slurm")


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def node(name, features=(), gres=None):
    return dict(name=name, state="idle", state_flags=[], partitions=["debug"], features=list(features),
                gres=parse_gres(gres))


NODES = [node("n0", ["h100", "ib"], "gpu:h100:8"), node("n1", ["h100"], "gpu:h100:8"),
         node("n2", ["a100", "ib"], "gpu:a100:4(S:0-1)"), node("n3", [], "gpu:8")]


def test_reservations_as_22_05_prints_them():
    active, later = parse_reservations(fixture("scontrol_show_reservation.txt"))
    assert (active["name"], active["state"], active["nodes"], active["node_count"], active["partition"],
            active["users"], active["accounts"], active["flags"]) == (
        "llm-week", "active", ["slurm-worker-0", "slurm-worker-1"], 2, None, ["root"], [], ["SPEC_NODES"])
    assert (later["state"], later["partition"], later["start_time"]) == ("inactive", "debug", "2026-12-06T08:49:40")
    assert parse_reservations(fixture("scontrol_show_reservation_none.txt")) == []


def test_associations_and_the_answer_without_accounting():
    assert parse_associations("ml-team||high,normal\nml-team|gpu|normal\n\n") == [
        dict(account="ml-team", partition=None, qos=["high", "normal"]),
        dict(account="ml-team", partition="gpu", qos=["normal"])]
    assert NO_ACCOUNTING_MARKER in fixture("sacctmgr_no_accounting.txt")


def test_a_constraint_of_features_no_node_has_names_them_and_what_the_nodes_have():
    assert site_check.constraint_errors("h200&ib", NODES, 1, "debug") == [
        "slurm_constraint=h200&ib names feature h200, which no usable node of partition debug has; their features: "
        "h100 (2 nodes), ib (2 nodes), a100 (1 node). Name features the nodes have (scontrol show node lists "
        "AvailableFeatures), or unset slurm_constraint."]


def test_a_constraint_is_counted_against_the_nodes_the_run_needs():
    assert site_check.constraint_errors("h100&ib", NODES, 1, "debug") == []
    assert site_check.constraint_errors("h100|a100", NODES, 3, "debug") == []
    short = site_check.constraint_errors("h100&ib", NODES, 2, "debug")
    assert short[0].startswith("slurm_constraint=h100&ib: 1 usable node of partition debug meets it, and "
                               "slurm_nodes=2;") and short[0].endswith("or lower slurm_nodes to 1.")
    # with brackets or counts only each feature is checked
    assert site_check.constraint_errors("[h100|a100]*2", NODES, 4, "debug") == []
    assert site_check.constraint_errors("", NODES, 4, "debug") == []


def test_a_gpu_type_the_nodes_do_not_register_or_too_few_of_them():
    assert site_check.gpu_type_errors("h100", 8, NODES, 2, "debug") == []
    assert site_check.gpu_type_errors("h200", 8, NODES, 1, "debug") == [
        "slurm_gpu_type=h200: no usable node of partition debug registers GPUs of that type; they register "
        "gpu:h100 (2 nodes), gpu (untyped) (1 node), gpu:a100 (1 node). Use a type they register (Gres=gpu:TYPE:N in "
        "scontrol show node), or unset slurm_gpu_type."]
    assert site_check.gpu_type_errors("a100", 8, NODES, 1, "debug")[0].startswith(
        "slurm_gpu_type=a100: 0 usable nodes of partition debug register 8 GPUs of that type")
    assert site_check.gpu_type_errors("a100", 0, NODES, 1, "debug") == []


def test_a_reservation_that_does_not_exist_is_too_small_or_is_for_others():
    reservations = parse_reservations(fixture("scontrol_show_reservation.txt"))
    usable = [node("slurm-worker-%d" % i) for i in range(3)]
    assert site_check.reservation_errors("nope", reservations, usable, 1, "debug") == ([
        "slurm_reservation=nope does not exist; Slurm has later, llm-week (scontrol show reservation). Fix the "
        "name, or unset slurm_reservation."], [])
    assert site_check.reservation_errors("llm-week", reservations, usable, 2, "debug", "root") == ([], [])
    errors = site_check.reservation_errors("llm-week", reservations, usable, 3, "debug", "ada")[0]
    assert errors == [
        "slurm_reservation=llm-week is for users root, not for ada: ask its owner to add you, or set slurm_account to "
        "one of its accounts.",
        "slurm_reservation=llm-week holds 2 usable nodes of partition debug (slurm-worker-0, slurm-worker-1), and "
        "slurm_nodes=3: lower slurm_nodes to 2, or use a larger reservation."]
    errors, notes = site_check.reservation_errors("later", reservations, usable, 1, "gpu", "root")
    assert errors == ["slurm_reservation=later is for partition debug, and the run's is gpu: set slurm_partition=debug, "
                      "or use another reservation."]
    assert notes == ["slurm_reservation=later starts at 2026-12-06T08:49:40 (Slurm's time): the run's jobs wait in the "
                     "queue until then."]


def test_account_and_qos_against_the_users_associations():
    assoc = parse_associations("ml-team||high,normal\nphysics|gpu|normal\n")
    assert site_check.association_errors("ml-team", "high", assoc, "debug", "ada") == ([], [])
    errors = site_check.association_errors("physics", "high", assoc, "debug", "ada")[0]
    assert errors == [
        "slurm_account=physics is not an account ada may use in partition debug; the associations allow ml-team "
        "(sacctmgr show assoc user=ada). Set one of them, or ask the administrators to add you to physics.",
        "slurm_qos=high is not a QoS ada may use with account physics; allowed: none. Set one of them, or unset "
        "slurm_qos for the default."]
    assert site_check.association_errors(None, "normal", assoc, "gpu", "ada") == ([], [])
    # no accounting: said, not refused
    assert site_check.association_errors("ml-team", None, None, "debug", "ada", "this cluster keeps no accounting") == (
        [], ["slurm_account not checked: this cluster keeps no accounting; Slurm itself takes or refuses it when "
             "the first job is submitted."])
    assert site_check.association_errors(None, None, None, "debug") == ([], [])


def test_the_preflight_filter_gathers_every_check():
    cluster = dict(reservations=[], associations=None, associations_note="no accounting", user="ada")
    site = preflight.FilterModule().filters()["site_errors"](cluster, "debug", NODES, dict(
        slurm_nodes=1, slurm_gpus_per_node=8, slurm_constraint="h200", slurm_gpu_type="h200",
        slurm_reservation="r", slurm_account="a", slurm_qos=None))
    assert [m.split(" ", 1)[0].split("=")[0] for m in site["errors"]] == [
        "slurm_constraint", "slurm_gpu_type", "slurm_reservation"]
    assert site["notes"] == ["slurm_account not checked: no accounting; Slurm itself takes or refuses it when the "
                             "first job is submitted."]


def test_an_sbatch_option_the_clusters_release_lacks_is_refused_naming_the_release():
    options = {"oom_kill_step": True, "nice": 10, "power": None}
    assert site_check.release_errors(options, "22.05.8") == [
        "slurm_sbatch_options: oom_kill_step: --oom-kill-step needs Slurm 24.11 or later, and this cluster runs "
        "22.05.8. Leave it out on this cluster."]
    assert site_check.release_errors(options, "24.11.5") == []
    assert site_check.release_errors({"power": "level"}, "24.05.3") == [
        "slurm_sbatch_options: power: --power was removed in Slurm 24.05, and this cluster runs 24.05.3. Leave it "
        "out on this cluster."]
    assert site_check.release_errors({"tres-per-task": "gres/gpu:1"}, "not a version") == []
