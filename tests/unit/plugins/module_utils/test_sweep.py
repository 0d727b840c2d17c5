"""A sweep's members from the sweep variable (module_utils/sweep/members.py): every combination of a
grid and the members of a list, each named from its values (never its position, so that a value
added keeps the names there were), nested keys and a script's flags merged into the inventory's
values, and every mistake said before anything is made, naming the key or the member and the fix;
each member's settings checked as the run's variables (the action), and the members compared
(report.py)."""

import struct

import pytest

from ansible_collections.llmtrain.slurm.plugins.action.sweep import member_errors
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep import fit, report
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import argument_specs
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs.run import RUN_NAME
from ansible_collections.llmtrain.slurm.plugins.module_utils.sweep.members import members

# every variable the roles declare, as the play would give them
KNOWN = sorted(set(name for entries in argument_specs.specs().values() for options in entries.values() for name in options))
BASE = {"pretrain_model": {"n_layer": 6, "n_head": 6, "n_embd": 384}, "pretrain_script_args": ["--epochs", "3", "--lr", "0.1"]}


def names(sweep, base=None):
    found, errors = members(sweep, KNOWN, base or BASE)
    assert errors == []
    return [member["name"] for member in found]


def test_a_grid_is_every_combination_named_from_its_values():
    found, errors = members({"name": "ladder", "grid": {"pretrain_learning_rate": [3e-4, 6e-4],
                                                        "pretrain_model.n_layer": [4, 8]}}, KNOWN, BASE)
    assert errors == []
    assert [m["name"] for m in found] == ["ladder-learning_rate0.0003-n_layer4", "ladder-learning_rate0.0003-n_layer8",
                                          "ladder-learning_rate0.0006-n_layer4", "ladder-learning_rate0.0006-n_layer8"]
    # the model's other keys are the inventory's
    assert found[1]["settings"] == {"pretrain_learning_rate": 3e-4,
                                    "pretrain_model": {"n_layer": 8, "n_head": 6, "n_embd": 384}}
    assert found[1]["values"] == {"pretrain_learning_rate": 3e-4, "pretrain_model.n_layer": 8}
    assert all(RUN_NAME.fullmatch(m["name"]) for m in found)
    assert BASE["pretrain_model"]["n_layer"] == 6  # the inventory's value is not changed


def test_adding_a_value_keeps_the_names_there_were():
    two = names({"name": "lr", "grid": {"pretrain_learning_rate": [3e-4, 6e-4]}})
    three = names({"name": "lr", "grid": {"pretrain_learning_rate": [1e-4, 3e-4, 6e-4]}})
    assert set(two) < set(three) and len(three) == 3


def test_a_list_adds_members_and_a_scripts_flag_replaces_the_inventorys():
    found, errors = members({"name": "own", "list": [{"pretrain_script_args.--lr": 0.01},
                                                     {"pretrain_script_args.--epochs": 5}]}, KNOWN, BASE)
    assert errors == []
    assert found[0]["settings"]["pretrain_script_args"] == ["--epochs", "3", "--lr=0.01"]
    assert found[1]["settings"]["pretrain_script_args"] == ["--lr", "0.1", "--epochs=5"]
    assert [m["name"] for m in found] == ["own-lr0.01", "own-epochs5"]


def test_values_that_make_no_run_name_or_too_long_a_one_are_named_by_a_digest_of_their_own():
    found = names({"name": "odd", "list": [{"slurm_partition": "a/b"}, {"slurm_partition": "a_b"},
                                           {"slurm_env_setup": ["module load cuda/12.4 " * 5]}]})
    assert found[1] == "odd-partitiona_b"
    assert [len(n) for n in (found[0], found[2])] == [len("odd-") + 10] * 2 and found[0] != found[2]
    assert all(RUN_NAME.fullmatch(n) and len(n) <= 64 for n in found)
    # a member's name depends on its own values alone
    assert names({"name": "odd", "list": [{"slurm_partition": "a/b"}]}) == found[:1]


@pytest.mark.parametrize("sweep, message", [
    ("lr", "sweep must be a dict with a name and a grid or a list"),
    ({"name": "x", "grid": {"pretrain_learning_rat": [1e-3]}},
     "sweep: pretrain_learning_rat is not a variable of llmtrain.slurm: did you mean pretrain_learning_rate?"),
    ({"name": "x", "grid": {"run_name": ["a", "b"]}}, "sweep: run_name cannot be swept"),
    ({"name": "x", "grid": {"pretrain_learning_rate": []}}, "sweep.grid.pretrain_learning_rate must be a non-empty list"),
    ({"name": "x"}, "sweep has no member: give a grid"),
    ({"name": "x", "list": [{}]}, "sweep.list[0] must be a dict of the member's settings"),
    ({"name": "-x", "list": [{"pretrain_steps": 1}]}, "sweep.name='-x' must be 1-53 letters"),
    ({"name": "x", "grids": {}}, "sweep has grids, which it does not take"),
    ({"name": "x", "grid": {"pretrain_learning_rate": [1e-3]}, "list": [{"pretrain_learning_rate": 1e-3}]},
     "sweep.list[0] is the same member as sweep.grid: give each member once"),
    ({"name": "x", "list": [{"pretrain_steps.n": 1}]}, "sweep.list[0]: pretrain_steps.n: pretrain_steps is not a dict"),
    ({"name": "x", "list": [{"pretrain_script_args.lr": 1}]},
     "sweep.list[0]: pretrain_script_args.lr: below pretrain_script_args give your script's flag as it takes it"),
    ({"name": "x", "list": [{"slurm_partition": "1"}, {"slurm_partition": 1}]},
     "sweep.list[0] and sweep.list[1] would both be run x-partition1"),
    ({"name": "x", "grid": {"sweep_params": [1, 2]}}, "sweep.grid.sweep_params: give a member's parameter count in sweep.list"),
    ({"name": "x", "list": [{"pretrain_script_args.--n": 1, "sweep_params": "1M"}]},
     "sweep.list[0].sweep_params='1M' must be the member's parameter count, a positive integer"),
    ({"name": "x", "list": [{"sweep_params": 1000}]}, "sweep.list[0] has sweep_params alone"),
])
def test_a_mistake_is_said_naming_the_key_or_the_member_and_the_fix(sweep, message):
    found, errors = members(sweep, KNOWN, dict(BASE, pretrain_steps=100))
    assert found == [] and any(error.startswith(message) for error in errors), errors


def test_your_scripts_member_may_give_its_parameter_count_which_is_neither_a_setting_nor_in_its_name():
    found, errors = members({"name": "own", "list": [{"pretrain_script_args.--n_embd": 32, "sweep_params": 52000},
                                                     {"pretrain_script_args.--n_embd": 64}]}, KNOWN, BASE)
    assert errors == [] and [m["name"] for m in found] == ["own-n_embd32", "own-n_embd64"]
    assert found[0]["params"] == 52000 and "params" not in found[1]
    assert found[0]["values"] == {"pretrain_script_args.--n_embd": 32}
    assert found[0]["settings"] == {"pretrain_script_args": ["--epochs", "3", "--lr", "0.1", "--n_embd=32"]}


# --- the comparison (module_utils/sweep/report.py) and the members' checks (the action) -------------

def member(name, state, values, step=None, loss=None):
    return dict(name=name, state=state, values=values, progress=None if step is None else dict(step=step, loss=loss))


def test_the_table_shows_each_members_values_state_step_and_loss_and_names_the_best_finished_one():
    found = [member("lr-a", "done", {"pretrain_learning_rate": 3e-4}, 40, 3.25),
             member("lr-b", "done", {"pretrain_learning_rate": 1e-3}, 40, 2.5),
             member("lr-c", "running", {"pretrain_learning_rate": 3e-3}, 20, 2.1),
             member("lr-d", "failed", {"pretrain_learning_rate": 1e-2}, 5, float("nan")),
             member("lr-e", "pending", {"pretrain_learning_rate": 3e-2})]
    text = report.markdown("lr", found)
    assert "Best finished member: **lr-b** (loss 2.5)." in text
    assert "| lr-d | 0.01 | failed | 5 |  |" in text and "| lr-e | 0.03 | pending |  |  |" in text
    # the lowest loss so far may be a running member's; a NaN is never lowest
    assert report.counts_line("lr", found) == (
        "sweep lr: 5 members, 2 done, 1 running, 1 pending, 1 failed; lowest loss 2.1 (lr-c, step 20)")


def test_the_sweeps_eta_is_its_running_members_longest_and_rounds_of_whole_trainings_for_those_waiting():
    running = [dict(member("s-%d" % i, "running", {}, 50, 2.0), progress=dict(step=50, total_steps=100, loss=2.0, eta_s=eta))
               for i, eta in enumerate((600.0, 1200.0))]
    waiting = [member("s-w%d" % i, "pending", {}) for i in range(3)]
    # 1,200 s left of the longest; 3 waiting at 2 at once: 2 rounds of a whole training (the median: 1,800 s)
    assert report.eta(running + waiting, parallel=2) == 1200.0 + 2 * 1800.0
    assert report.counts_line("s", running + waiting, 2).endswith("; ETA about 1h 20m")
    assert report.eta(running) == 1200.0 and report.eta(waiting) is None
    assert report.eta(running + [dict(running[0], progress=dict(step=1, loss=2.0))]) is None  # one says no ETA


def test_the_watchs_line_names_the_members_that_recovered_a_few_of_them():
    found = [dict(member("s-%d" % i, "running", {}, 5, 2.0), recovered="started again after its start ended preempted")
             for i in range(5)] + [dict(member("s-p", "pending", {}), recovered="requeued: its start\x1b[2J ended hang")]
    line = report.counts_line("s", found)
    assert line.endswith("; recovered: s-0 (started again after its start ended preempted); s-1 (started again after its "
                         "start ended preempted); s-2 (started again after its start ended preempted) and 3 more"), line
    assert "\x1b" not in report.counts_line("s", found[5:])


def test_the_table_says_hours_gpu_hours_and_where_each_members_losses_came_from():
    found = [dict(member("own-a", "done", {"pretrain_script_args.--n_embd": 32}, 40, 2.5), source="log", curve=[[40, 2.5]],
                  final_loss=2.5, hours=0.5, gpu_hours=4.0, params=52000),
             dict(member("own-b", "done", {"pretrain_script_args.--n_embd": 64}, 40, 2.25), source="events",
                  curve=[[40, 2.25]], final_loss=2.25, hours=0.75, gpu_hours=6.0, params=190000),
             dict(member("own-c", "pending", {"pretrain_script_args.--n_embd": 96}), source=None, curve=[])]
    text = report.markdown("own", found)
    assert "| member | pretrain_script_args.--n_embd | state | step | loss | best loss | val loss | params | tokens | hours " \
           "| GPU-hours |" in text
    assert "| own-b | 64 | done | 40 | 2.25 |  |  | 190k |  | 0.75 | 6.00 |" in text, text
    assert "Losses from: TensorBoard event files (1), its log lines (1)." in text
    assert "No loss yet from 1 member(s): own-c (your script:" in text
    assert "No scaling law yet: the members differ in size, 2 size(s) finished, and the law takes at least three." in text


def test_a_value_from_the_workspace_is_shown_printable():
    text = report.markdown("s", [member("s-x", "done", {"pretrain_script_args.--tag": "a\x1b[31mb"}, 1, 1.0)])
    assert "\x1b" not in text


def test_each_members_settings_are_checked_as_the_runs_variables_naming_the_member():
    values = dict(pretrain_model={"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 64}, slurm_nodes=1)
    found, errors = members({"name": "s", "list": [{"pretrain_model.n_head": 3}, {"slurm_nodes": "two"},
                                                   {"pretrain_learning_rate": 1e-3}]}, KNOWN, values)
    assert errors == []
    said = member_errors(found, values)
    assert len(said) == 2, said
    assert said[0].startswith("sweep member s-n_head3: pretrain_model: n_embd=64 must be a multiple of n_head=3")
    assert said[1].startswith("sweep member s-nodestwo: ") and "slurm_nodes" in said[1] and "int" in said[1]


# --- the scaling law (module_utils/sweep/fit.py) and the comparison's plot -------------------------

def law_members(sizes=(1e6, 3e6, 1e7, 3e7, 1e8), rates=(1e-3, 3e-4), noise=0.0):
    """Members of a model-size ladder x learning rates whose best rate follows E + A N^-alpha."""
    found = []
    for index, size in enumerate(sizes):
        for rate in rates:
            loss = 1.7 + 400.0 * size ** -0.34 + (0.0 if rate == rates[0] else 0.05) + noise * (-1) ** index
            found.append(dict(name="ladder-%d-%g" % (index, rate), state="done", values={"n": index, "lr": rate},
                              params=size, tokens=20 * size, final_loss=loss, best_loss=loss - 0.01,
                              curve=[[0, 5.0], [100, loss]], progress={"step": 100, "loss": loss}))
    return found


def test_a_known_law_is_found_with_its_exponent_and_what_it_predicts():
    law = fit.fit([(size, 1.7 + 400.0 * size ** -0.34) for size in (1e6, 3e6, 1e7, 3e7, 1e8, 3e8)])
    assert abs(law["alpha"] - 0.34) < 1e-6 and abs(law["E"] - 1.7) < 1e-6 and law["trusted"] and law["why"] == []
    assert abs(fit.predict(law, 1e9) - (1.7 + 400.0 * 1e9 ** -0.34)) < 1e-6
    noisy = fit.fit([(size, (1.7 + 400.0 * size ** -0.34) * (1 + 0.01 * (-1) ** k)) for k, size in enumerate((1e6, 3e6, 1e7, 3e7, 1e8))])
    assert noisy["alpha_err"] > 0 and abs(noisy["alpha"] - 0.34) < 5 * noisy["alpha_err"]


def test_a_fit_that_cannot_be_trusted_says_why():
    three = fit.fit([(1e6, 3.0), (1e7, 2.5), (1e8, 2.3)])
    assert not three["trusted"] and three["alpha_err"] is None and "at least 4 are needed" in three["why"][0]
    rising = fit.fit([(1e6, 3.0), (1e7, 2.5), (1e8, 2.7), (1e9, 2.2)])
    assert not rising["trusted"] and "the loss does not fall with every larger size" in rising["why"]
    assert fit.fit([(1e6, 3.0), (1e7, 2.5)]) is None and fit.fit([(0, 3.0), (1e7, 2.5), (1e8, 2.0)]) is None


def test_the_law_is_fitted_over_the_best_rate_of_each_size_against_parameters_and_compute():
    found = report.with_compute(law_members())
    laws = report.laws(found, predict_at=1e9)
    assert [point[2] for point in laws["params"]["points"]] == ["ladder-%d-0.001" % k for k in range(5)]
    assert abs(laws["params"]["law"]["alpha"] - 0.34) < 1e-6 and laws["params"]["predict_at"] == 1e9
    assert "compute" in laws and laws["compute"]["predict_at"] == 10 * max(p[0] for p in laws["compute"]["points"])
    text = report.markdown("ladder", found, laws)
    assert "## Scaling law" in text and "Against parameters, over 5 sizes" in text
    assert "Predicted loss at N = 1G: %.4g." % laws["params"]["predicted"] in text
    assert "![loss curves](sweep.png)" in text and "| params | tokens |" in text
    # no sizes that differ: no law
    assert report.laws(law_members(sizes=(1e6,))) == {}


def test_the_plot_shows_every_curve_and_the_law(tmp_path):
    found = report.with_compute(law_members())
    path = tmp_path / "sweep.png"
    report.plot("ladder", found, report.laws(found), str(path))
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24])[0] > 1000  # two panels wide
    report.plot("lr", found[:2], {}, str(path))
    assert struct.unpack(">II", path.read_bytes()[16:24])[0] < 1000
