import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils import inputs

GOOD = dict(run_name="gpt2-124m", pretrain_steps=20000, pretrain_batch_size=16, pretrain_learning_rate=6e-4,
            pretrain_model=dict(n_layer=12, n_head=12, n_embd=768, block_size=1024), pretrain_checkpoint_interval=1000,
            run_requeue_max=3, run_force=False, pretrain_extra_args=["--warmup", "100"],
            inference_prompts=["def "], inference_max_new_tokens=200, inference_temperature=0.8, inference_top_k=50,
            slurm_partition="gpu", slurm_nodes=3, slurm_gpus_per_node=4, slurm_procs_per_node=4,
            slurm_cpus_per_task=16, slurm_mem_per_cpu="8G", slurm_time_limit="2-00:00:00",
            slurm_master_port="auto", slurm_workspace="/shared/work", slurm_python="/shared/venv/bin/python",
            slurm_env_setup=["module load cuda/12.4"], run_gpu_policy="strict",
            nccl_env_socket_ifname="eth0", nccl_env_ib_hca="mlx5_0:1",
            deploy_venv_create=True, deploy_venv_base_python="python3.11", deploy_venv_packages=["torch==2.13.0", "numpy"],
            deploy_venv_pip_args=["--index-url", "https://download.pytorch.org/whl/cu124"],
            deploy_venv_system_site_packages=False, deploy_tokenizer="bpe", deploy_vocab_size=32768)


def test_a_good_inventory_passes():
    assert inputs.validate(GOOD) == []


@pytest.mark.parametrize("time_limit", ["30", "10:00", "04:00:00", "1-12", "1-12:30", "2-00:00:00", "UNLIMITED"])
def test_slurm_time_formats(time_limit):
    assert inputs.validate(dict(slurm_time_limit=time_limit)) == []


@pytest.mark.parametrize("name, value", [
    ("slurm_partition", "debug\nrm -rf ~"), ("slurm_partition", "debug\n"), ("slurm_time_limit", "04:00:00\n"),
    ("slurm_time_limit", "30\ncurl x | sh"), ("slurm_mem_per_cpu", "2G\n"), ("run_name", "run\n"),
    ("slurm_python", "/shared/v/bin/python\n"),
])
def test_a_newline_never_reaches_a_job_script(name, value):
    """Values that land in #SBATCH lines or paths: a trailing newline would start a shell command."""
    values = dict(deploy_venv_create=True, slurm_python="/shared/v/bin/python") if name == "slurm_python" else {}
    values[name] = value
    errors = inputs.validate(values)
    assert errors and all(e.startswith(name) or "slurm_python=" in e for e in errors), errors


@pytest.mark.parametrize("name, value, words", [
    ("slurm_partition", "gpu;reboot", "is not a partition name"),
    ("slurm_nodes", 0, "must be a whole number >= 1"),
    ("slurm_nodes", "three", "must be a whole number >= 1"),
    ("slurm_nodes", True, "must be a whole number >= 1"),
    ("slurm_gpus_per_node", -1, "0 for CPU nodes"),
    ("slurm_procs_per_node", 0, "one per GPU"),
    ("slurm_cpus_per_task", "2.5", "must be a whole number >= 1"),
    ("slurm_mem_per_cpu", "8GB", "such as 2G or 512M"),
    ("slurm_time_limit", "4h", "HH:MM:SS"),
    ("slurm_master_port", 80, "from 1024 to 65535"),
    ("slurm_master_port", "99999", "from 1024 to 65535"),
    ("slurm_workspace", "relative/dir", "absolute path"),
    ("slurm_python", "", "interpreter on the compute nodes"),
    ("slurm_env_setup", "module load cuda", "list of shell lines"),
    ("slurm_env_setup", ["module load a\nrm -rf /"], "one line per item"),
    ("nccl_env_debug", "LOUD", "VERSION, WARN, INFO, TRACE"),
    ("run_name", "../escape", "names a directory"),
    ("pretrain_steps", 0, "optimizer steps"),
    ("pretrain_poll_interval", 0, "seconds between progress lines"),
    ("pretrain_learning_rate", "fast", "between 0 and 1"),
    ("pretrain_extra_args", "--warmup 100", "list of strings"),
    ("pretrain_straggler_threshold", 0, "must be a number above 0"),
    ("pretrain_straggler_threshold", "slow", "must be a number above 0"),
    ("pretrain_straggler_intervals", 11, "from 0 (no straggler lines) to 10"),
    ("pretrain_straggler_intervals", -1, "from 0 (no straggler lines) to 10"),
    ("run_wandb_project", "team/project", "none of / \\ # ? % : (the entity goes in run_wandb_entity)"),
    ("run_wandb_project", "", "1-128 characters"),
    ("run_wandb_mode", "cloud", "online (the nodes reach W&B) or offline"),
    ("inference_prompts", [], "non-empty list"),
    ("inference_temperature", -1, "must be 0 (the most likely token) or from 0.0001 to 10000."),
    ("inference_max_new_tokens", 0, "tokens generated per prompt"),
    ("deploy_venv_packages", "torch numpy", "list of one-line strings"),
    ("deploy_venv_pip_args", ["--index-url", ""], "list of one-line strings"),
    ("deploy_venv_base_python", "", "makes the venv"),
    ("deploy_tokenizer", "gpt2", "bytes, bpe, or the absolute path of a tokenizer.json"),
    ("deploy_tokenizer", "tokenizers/t.json", "absolute path"),
    ("deploy_tokenizer", "/t.json\nrm -rf /", "absolute path"),
    ("deploy_vocab_size", 256, "must be a whole number >= 512: tokens of the BPE"),
])
def test_each_bad_value_is_named_with_its_fix(name, value, words):
    errors = inputs.validate(dict(GOOD, **{name: value}))
    assert len(errors) == 1, errors
    assert errors[0].startswith("%s=%r" % (name, value))
    assert words in errors[0]


@pytest.mark.parametrize("name, value", [
    ("slurm_nodes", "\u0662"), ("slurm_gpus_per_node", "\uff14"), ("slurm_cpus_per_task", "\u00b2"),
    ("slurm_time_limit", "\u0663\u0660"), ("slurm_time_limit", "1-\u0661\u0662"),
])
def test_a_number_of_other_digits_than_0_to_9_is_refused(name, value):
    """Arabic-Indic, fullwidth and superscript digits, which Python reads as numbers and Slurm does not."""
    errors = inputs.validate(dict(GOOD, **{name: value}))
    assert len(errors) == 1 and errors[0].startswith("%s=%r" % (name, value)), errors


@pytest.mark.parametrize("value", [0, 0.0, "0", 1e-4, 0.8, 1, 1e4, "10000"])
def test_inference_temperature_takes_0_and_what_sampling_divides_by(value):
    assert inputs.validate(dict(GOOD, inference_temperature=value)) == []


@pytest.mark.parametrize("value", [-0.5, 1e-320, 9e-5, 10000.5, 1e39, float("inf"), float("nan"), "nan", "warm"])
def test_inference_temperature_sampling_cannot_divide_by_is_refused_before_any_job(value):
    """Outside the range the trainer's probabilities are NaN: the job would fail only once it runs."""
    errors = inputs.validate(dict(GOOD, inference_temperature=value))
    assert errors == ["inference_temperature=%r must be 0 (the most likely token) or from 0.0001 to 10000." % (value,)]


def test_more_processes_than_gpus():
    errors = inputs.validate(dict(GOOD, slurm_procs_per_node=8))
    assert errors == ["slurm_procs_per_node=8 is more than slurm_gpus_per_node=4: each process needs its own GPU, "
                      "so set slurm_procs_per_node to 4 or fewer."]
    assert inputs.validate(dict(GOOD, slurm_gpus_per_node=0, slurm_procs_per_node=8)) == []  # CPU: any number


def test_every_problem_is_reported_at_once():
    errors = inputs.validate(dict(slurm_nodes=0, slurm_master_port=1, nccl_env_cross_nic=9))
    assert [e.split("=")[0] for e in errors] == ["slurm_nodes", "slurm_master_port", "nccl_env_cross_nic"]


def test_model_shape():
    assert inputs.validate(dict(pretrain_model=dict(n_layer=2, n_head=3, n_embd=64))) == [
        "pretrain_model: n_embd=64 must be a multiple of n_head=3."]
    assert inputs.validate(dict(pretrain_model=dict(n_layer=0))) == ["pretrain_model: n_layer must be whole numbers >= 1."]
    assert inputs.validate(dict(pretrain_model="big"))[0].startswith("pretrain_model='big' must be a mapping")


@pytest.mark.parametrize("python", ["python3", "/shared/venv/bin/", "venv/bin/python", "/bin/python"])
def test_a_venv_to_make_needs_slurm_python_to_be_its_interpreter(python):
    assert inputs.validate(dict(GOOD, slurm_python=python)) == [
        "deploy_venv_create=true makes the venv that slurm_python names, so slurm_python=%r must be the venv's "
        "interpreter: an absolute path ending in bin/python, such as /shared/venvs/llmtrain/bin/python." % python]
    assert inputs.validate(dict(GOOD, slurm_python=python, deploy_venv_create=False)) == []


def test_a_venv_without_packages_has_no_torch():
    assert inputs.validate(dict(GOOD, deploy_venv_packages=[])) == [
        "deploy_venv_packages=[] installs nothing, but the trainer needs torch: list at least torch."]


@pytest.mark.parametrize("name, value, words", [
    ("pretrain_rendezvous_timeout", 0, "seconds for the nodes to reach each other"),
    ("pretrain_rendezvous_timeout", "soon", "seconds for the nodes to reach each other"),
    ("pretrain_controller_timeout", -1, "Slurm controller that does not answer"),
    ("pretrain_controller_timeout", 1.5, "Slurm controller that does not answer"),
    ("pretrain_restarts_in_job", -1, "restarts of the training processes inside one start of the job"),
    ("pretrain_restarts_in_job", "twice", "restarts of the training processes inside one start of the job"),
])
def test_fault_timeouts_are_named_with_their_fix(name, value, words):
    errors = inputs.validate(dict(GOOD, **{name: value}))
    assert len(errors) == 1, errors
    assert errors[0].startswith("%s=%r must be a whole number >= " % (name, value)) and words in errors[0]


def test_fault_timeouts_accept_their_smallest_values():
    assert inputs.validate(dict(GOOD, pretrain_rendezvous_timeout=1, pretrain_controller_timeout=0)) == []
    assert inputs.validate(dict(GOOD, pretrain_rendezvous_timeout="300", pretrain_controller_timeout="600")) == []


# The local inventory's run: 3 nodes x 2 processes of a 2-layer, 64-wide model.
LOCAL_RUN = dict(pretrain_model=dict(n_layer=2, n_head=2, n_embd=64, block_size=64), slurm_nodes=3,
                 slurm_procs_per_node=2, pretrain_extra_args=["--warmup", "20", "--eval-interval", "200"])
# step_*.pt of that run, as the reference trainer wrote it.
LOCAL_CHECKPOINT_BYTES = 1567623


def one_checkpoint(values):
    """workspace_need's bytes for one checkpoint (it counts the kept ones and the one being written)."""
    need, how = inputs.workspace_need(values)
    count = int(how.split()[0])
    assert need % count == 0
    return need // count


def test_workspace_need_of_the_local_run_covers_its_real_checkpoints():
    need, how = inputs.workspace_need(LOCAL_RUN)
    assert 4 * LOCAL_CHECKPOINT_BYTES <= need < 2 * 4 * LOCAL_CHECKPOINT_BYTES  # 3 kept and 1 being written
    assert how == "4 checkpoints of about 1.6 MiB (120576 parameters, weights and Adam state)"


# Checkpoints the reference trainer's state (weights, AdamW, a random state per rank) takes
# in torch.save, measured: (n_layer, n_embd, block_size, ranks) -> (parameters, bytes).
MEASURED = {
    (12, 768, 1024, 1): (86039040, 1032656283),   # GPT-2 small's shape, byte-level vocabulary
    (12, 768, 1024, 32): (86039040, 1033102943),
    (4, 256, 256, 16): (3290624, 39780063),
    (48, 64, 64, 1): (2419840, 29726469),          # many small tensors
    (1, 16, 16, 1): (7664, 126429),
}


@pytest.mark.parametrize("shape", sorted(MEASURED))
def test_workspace_need_is_never_less_than_a_measured_checkpoint(shape):
    layers, width, block, ranks = shape
    params, measured = MEASURED[shape]
    values = dict(pretrain_model=dict(n_layer=layers, n_embd=width, block_size=block), slurm_nodes=ranks)
    assert "(%d parameters," % params in inputs.workspace_need(values)[1]  # the trainer's model, counted exactly
    assert measured <= one_checkpoint(values) < max(measured * 1.05, measured + 200000)


@pytest.mark.parametrize("extra_args, count", [
    ([], 4),
    (["--keep-checkpoints", "100"], 101),
    (["--warmup", "20", "--keep-checkpoints=5", "--log-interval", "10"], 6),
    (["--keep-checkpoints", 1], 2),
    (["--keep-checkpoints"], 4),  # no value: the trainer's default
    (["--keep-checkpoints", "many"], 4),
])
def test_workspace_need_counts_the_checkpoints_the_trainer_keeps(extra_args, count):
    need, how = inputs.workspace_need(dict(LOCAL_RUN, pretrain_extra_args=extra_args))
    assert need == count * one_checkpoint(LOCAL_RUN) and how.startswith("%d checkpoints of" % count)


def test_workspace_need_grows_with_the_ranks_random_states():
    assert one_checkpoint(dict(LOCAL_RUN, slurm_nodes=6)) - one_checkpoint(LOCAL_RUN) == 6 * inputs.pretrain.RNG_BYTES_PER_RANK
    assert one_checkpoint(dict(LOCAL_RUN, slurm_nodes=None, slurm_procs_per_node=None)) == \
        one_checkpoint(dict(LOCAL_RUN, slurm_nodes=1, slurm_procs_per_node=1))


@pytest.mark.parametrize("values", [
    dict(LOCAL_RUN, run_script="/shared/my_train.py"),
    dict(LOCAL_RUN, pretrain_model=None),
    dict(LOCAL_RUN, pretrain_model=dict(n_layer=2, n_embd=64)),
    dict(LOCAL_RUN, pretrain_model=dict(n_layer=0, n_embd=64, block_size=64)),
    dict(LOCAL_RUN, pretrain_model=dict(n_layer="two", n_embd=64, block_size=64)),
    dict(slurm_nodes=2),
])
def test_workspace_need_is_unknown_for_your_own_script_or_no_model(values):
    assert inputs.workspace_need(values) is None


def test_a_workspace_may_hold_metacharacters_but_no_backslash():
    # spaces, quotes, $( ), ; and % are quoted where they are used (argv, quote, the sbatch directive)
    assert inputs.validate(dict(GOOD, slurm_workspace="/shared/ws 1/it's \"$(x)\"; 100%")) == []
    errors = inputs.validate(dict(GOOD, slurm_workspace="/shared/a\\b"))
    assert len(errors) == 1 and errors[0].startswith("slurm_workspace='/shared/a\\\\b' contains a backslash")
    assert "pick a path without one" in errors[0]


@pytest.mark.parametrize("nodes", [[], ["gpu-07"], ["gpu-07", "gpu-[10-12]"], ["gpu-[01-04,09],n1.cluster"],
                                   ["a, b"], ["node_1"]])
def test_slurm_exclude_nodes_takes_node_names_and_hostlists(nodes):
    assert inputs.validate(dict(GOOD, slurm_exclude_nodes=nodes)) == []


@pytest.mark.parametrize("nodes", ["gpu-07", ["gpu-07 gpu-08"], ["gpu-07;reboot"], ["$(id)"], ["-x"], [""],
                                   ["gpu-07,"], [7], [["gpu-07"]], {"gpu-07": True}])
def test_slurm_exclude_nodes_refuses_anything_else(nodes):
    assert inputs.validate(dict(GOOD, slurm_exclude_nodes=nodes)) == [
        "slurm_exclude_nodes=%r must be a list of node names or hostlists, such as [gpu-07, \"gpu-[10-12]\"]."
        % (nodes,)]


@pytest.mark.parametrize("env", [{}, None, {"SLURM_CONF": "/etc/slurm-b/slurm.conf"},
                                 {"PATH": "/opt/slurm-24.11/bin:/usr/bin:/bin", "SLURM_CONF": "/etc/slurm/slurm.conf"},
                                 {"SLURM_TIME_FORMAT": "standard", "SQUEUE_SORT": 7}])
def test_slurm_client_env_takes_variables_with_one_line_values(env):
    assert inputs.validate(dict(GOOD, slurm_client_env=env)) == []


def test_slurm_client_env_refuses_what_is_no_environment():
    assert inputs.validate(dict(GOOD, slurm_client_env=["PATH=/x"])) == [
        "slurm_client_env=['PATH=/x'] must be a mapping of environment variables to values, such as "
        "{SLURM_CONF: /etc/slurm-b/slurm.conf}."]
    assert inputs.validate(dict(GOOD, slurm_client_env={"SLURM CONF": "/x", "1X": "y"})) == [
        "slurm_client_env: 'SLURM CONF' is not an environment variable name (letters, digits and _, not starting "
        "with a digit).",
        "slurm_client_env: '1X' is not an environment variable name (letters, digits and _, not starting with a digit)."]
    assert inputs.validate(dict(GOOD, slurm_client_env={"SLURM_CONF": "/x\n/y", "A": True, "B": ["x"]})) == [
        "slurm_client_env.SLURM_CONF='/x\\n/y' must be one line of text.",
        "slurm_client_env.A=True must be one line of text.", "slurm_client_env.B=['x'] must be one line of text."]
    assert inputs.validate(dict(GOOD, slurm_client_env={"PATH": "bin:/usr/bin"})) == [
        "slurm_client_env.PATH='bin:/usr/bin' must list absolute directories, as the whole PATH of the Slurm "
        "commands (such as /opt/slurm/bin:/usr/bin:/bin)."]


def test_slurm_node_check_timeout_is_at_least_ten_seconds():
    assert inputs.validate(dict(GOOD, slurm_node_check_timeout=10)) == []
    assert inputs.validate(dict(GOOD, slurm_node_check_timeout="300")) == []
    for value in (5, 0, "soon", 30.5):
        assert inputs.validate(dict(GOOD, slurm_node_check_timeout=value)) == [
            "slurm_node_check_timeout=%r must be a whole number >= 10: seconds the node check step of a job may take."
            % (value,)]


@pytest.mark.parametrize("values, words", [
    (dict(run_source_dir="/home/me/nanolm"),
     "run_source_dir=/home/me/nanolm is set but run_script is not: name your training script inside it"),
    (dict(run_source_dir="/home/me/nanolm", run_script="/home/me/nanolm/train.py"),
     "run_script=/home/me/nanolm/train.py must be a path inside run_source_dir=/home/me/nanolm, relative"),
    (dict(run_source_dir="/home/me/nanolm", run_script="../other/train.py"),
     "run_script=../other/train.py must be a path inside run_source_dir"),
    (dict(run_script_chdir="run\nrm -rf /"), "run_script_chdir='run\\nrm -rf /' must be a path on one line"),
    (dict(run_source_exclude="data/*"), "run_source_exclude='data/*' must be a list of one-line strings"),
])
def test_your_own_scripts_paths_are_checked_before_anything_runs(values, words):
    errors = inputs.validate(dict(GOOD, **values))
    assert len(errors) == 1 and errors[0].startswith(words), errors


@pytest.mark.parametrize("values", [
    dict(run_script="/home/me/train.py"),
    dict(run_source_dir="/home/me/nanolm", run_script="scripts/train.py", run_script_chdir="scripts",
         run_source_exclude=["data/*", "*.ckpt"]),
    dict(run_source_dir="~/nanolm", run_script="train.py", run_source_exclude=[]),
])
def test_your_own_script_in_a_source_dir_or_alone_passes(values):
    assert inputs.validate(dict(GOOD, **values)) == []


def test_your_progress_patterns_are_checked_before_anything_runs():
    assert inputs.validate(dict(GOOD, pretrain_progress_regex=[r"^E(?P<step>\d+) L=(?P<loss>\S+)"])) == []
    errors = inputs.validate(dict(GOOD, pretrain_progress_regex=[r"step (?P<step>\d+)"]))
    assert errors == ["pretrain_progress_regex: 'step (?P<step>\\\\d+)' has no (?P<loss>...) group: name the loss "
                      "(and the step, (?P<step>...)) in it."]
    assert inputs.validate(dict(GOOD, pretrain_progress_regex="iter"))[0].startswith(
        "pretrain_progress_regex='iter' must be a list of regular expressions")


def test_the_loss_tag_and_total_of_event_files_are_checked_before_anything_runs():
    assert inputs.validate(dict(GOOD, pretrain_progress_tag="lm loss", pretrain_progress_total_steps=60)) == []
    assert inputs.validate(dict(GOOD, pretrain_progress_tag=" ")) == [
        "pretrain_progress_tag=' ' must be the tag of your loss's scalar in your TensorBoard event files (such as "
        "'train_loss'), or null for the known ones."]
    assert inputs.validate(dict(GOOD, pretrain_progress_total_steps=0)) == [
        "pretrain_progress_total_steps=0 must be the number of steps your script trains (1 or more), or null where "
        "its records say."]


@pytest.mark.parametrize("values, words", [
    (dict(inference_script="sample.py"), "inference_script=sample.py is for a run of your own training script"),
    (dict(run_script="/home/me/train.py", inference_script="/home/me/sample.py"),
     "inference_script=/home/me/sample.py must be a path relative to the directory your code is deployed to"),
    (dict(run_script="/home/me/train.py", inference_script=["sample.py"]),
     "inference_script=['sample.py'] must be a path on one line"),
])
def test_your_sampling_script_is_checked_before_anything_runs(values, words):
    errors = inputs.validate(dict(GOOD, **values))
    assert len(errors) == 1 and errors[0].startswith(words), errors
    assert inputs.validate(dict(GOOD, run_script="/home/me/train.py", inference_script="sample.py")) == []


def test_a_tokenizer_file_needs_no_vocabulary_size():
    assert inputs.validate(dict(GOOD, deploy_tokenizer="/shared/tok/tokenizer.json", deploy_vocab_size=0)) == []
    assert inputs.validate(dict(GOOD, deploy_tokenizer="bytes", deploy_vocab_size=0)) == []


def test_pretrain_parallel_is_ddp_or_fsdp_and_for_the_reference_trainer_only():
    assert inputs.validate(dict(GOOD, pretrain_parallel="fsdp")) == []
    assert inputs.validate(dict(GOOD, pretrain_parallel="zero3")) == [
        "pretrain_parallel='zero3' must be ddp (every process holds the whole model and optimizer) or fsdp "
        "(parameters, gradients and optimizer state sharded over the processes)."]
    assert inputs.validate(dict(GOOD, pretrain_parallel="fsdp", run_script="train.py")) == [
        "pretrain_parallel=fsdp is for the reference trainer; your script (run_script=train.py) parallelises as "
        "it does itself: remove pretrain_parallel, or pass your script its own flag in pretrain_script_args."]
    assert inputs.validate(dict(GOOD, pretrain_parallel="ddp", run_script="train.py")) == []  # the default


# Sharded checkpoints (pretrain_parallel: fsdp) as the reference trainer wrote them, measured:
# (n_layer, n_embd, block_size, ranks) -> (parameters, bytes of the step directory's files).
MEASURED_SHARDED = {
    (2, 64, 64, 6): (120576, 2583792),       # the local run
    (48, 64, 64, 3): (2419840, 39694723),    # many small tensors
    (4, 256, 256, 2): (3290624, 40492638),
    (1, 16, 16, 3): (7664, 483218),
}


@pytest.mark.parametrize("shape", sorted(MEASURED_SHARDED))
def test_workspace_need_covers_a_measured_sharded_checkpoint(shape):
    layers, width, block, ranks = shape
    params, measured = MEASURED_SHARDED[shape]
    values = dict(pretrain_model=dict(n_layer=layers, n_embd=width, block_size=block), slurm_nodes=ranks,
                  pretrain_parallel="fsdp")
    assert "(%d parameters," % params in inputs.workspace_need(values)[1]
    assert measured <= one_checkpoint(values) < max(measured * 1.25, measured + 200000)
    assert one_checkpoint(values) > one_checkpoint(dict(values, pretrain_parallel="ddp"))


@pytest.mark.parametrize("value", [0, -0.1, 1.5, "half", True])
def test_network_min_fraction_is_named_with_its_range(value):
    assert inputs.validate(dict(GOOD, pretrain_network_min_fraction=value)) == [
        "pretrain_network_min_fraction=%r must be a number above 0 and at most 1, such as 0.5 (the fraction of the "
        "slowest link's speed below which the network check calls a node slow)." % (value,)]


@pytest.mark.parametrize("value", [0.5, 1, "0.25", 0.01])
def test_network_min_fraction_accepts_fractions(value):
    assert inputs.validate(dict(GOOD, pretrain_network_min_fraction=value)) == []


def test_network_policy_names_its_choices():
    assert inputs.validate(dict(GOOD, pretrain_network_policy="ignore")) == [
        "pretrain_network_policy='ignore' must be one of warn, exclude, fail: warn names a slow node and trains on, "
        "exclude requeues the job without it, fail ends the job."]
    for policy in ("warn", "exclude", "fail"):
        assert inputs.validate(dict(GOOD, pretrain_network_policy=policy)) == []


@pytest.mark.parametrize("value, fine", [("auto", True), (0, True), (20, True), ("45", True), (-1, False),
                                         ("soon", False), (True, False)])
def test_hang_timeout_is_auto_seconds_or_zero(value, fine):
    found = inputs.validate(dict(GOOD, pretrain_hang_timeout=value))
    assert found == ([] if fine else [
        "pretrain_hang_timeout=%r must be auto (10 times the median interval between records, at least 300 s), a "
        "number of seconds, or 0 (no hang watch)." % (value,)])


def test_hang_policy_names_its_choices():
    assert inputs.validate(dict(GOOD, pretrain_hang_policy="ignore")) == [
        "pretrain_hang_policy='ignore' must be one of requeue, fail, warn: requeue restarts the job without the node "
        "the hang names, fail ends the job, warn says so and waits on."]
    assert inputs.validate(dict(GOOD, pretrain_hang_policy="fail")) == []


def test_each_roles_checks_live_in_its_own_module():
    """inputs/ is split by role: the module named after a role checks that role's variables (a value
    of another role it reads only to bound its own), and every role whose variables need code has one;
    beside them, the reader of the specs they take their choices from."""
    import glob
    import os
    import re
    here = os.path.dirname(inputs.__file__)
    modules = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(here, "*.py")))
    assert modules == ["__init__", "argument_specs", "common", "deploy", "inference", "local_cluster", "pretrain", "run",
                       "slurm"]
    for module in modules[3:]:
        with open(os.path.join(here, module + ".py"), encoding="utf-8") as handle:
            text = handle.read()
        checked = (set(re.findall(r'"(\w+)" in values', text)) | set(re.findall(r'count\(found, values, "(\w+)"', text))
                   | set(re.findall(r'\bv\["(\w+)"\]', text)) | set(re.findall(r'^    \("(\w+)", r"', text, re.M)))
        assert checked, module
        assert sorted(n for n in checked if not n.startswith(module + "_")) == [], module
    messages = inputs.validate(dict(slurm_nodes=0, run_name="../x", deploy_tokenizer="x", pretrain_steps=0,
                                    inference_top_k=-1))
    assert [m.split("=", 1)[0] for m in messages] == [
        "slurm_nodes", "run_name", "deploy_tokenizer", "pretrain_steps", "inference_top_k"]


def test_site_options_are_checked_before_anything_reaches_slurm():
    assert inputs.validate(dict(slurm_account="ml-team", slurm_qos="high", slurm_reservation="llm-week",
                                slurm_constraint="[h100|a100]&ib", slurm_gpu_type="h100", slurm_gpus_per_node=8,
                                slurm_mail_type="END,FAIL", slurm_mail_user="ada@example.org",
                                slurm_sbatch_options={"wckey": "llm", "nice": 10, "cpu_freq": "high",
                                                      "wait-all-nodes": True})) == []
    messages = inputs.validate(dict(slurm_account="ml team", slurm_constraint="h100 && ib", slurm_gpu_type="h100",
                                    slurm_gpus_per_node=0, slurm_mail_user="ada@example.org",
                                    slurm_sbatch_options={"output": "x", "gres": "gpu:2", "requeue": True, "bogus": 1,
                                                          "nice": [1]}))
    assert messages == [
        "slurm_account='ml team' must be an account name, such as ml-team: letters, digits and _ . - + @, no blanks, "
        "commas or colons.",
        "slurm_constraint='h100 && ib' must be node features in --constraint's syntax, such as h100, \"h100&ib\" or "
        "\"a100|h100\" (no blanks).",
        "slurm_gpu_type=h100 asks for GPUs of that type, but slurm_gpus_per_node=0 asks for none: set "
        "slurm_gpus_per_node, or unset slurm_gpu_type.",
        "slurm_mail_user=ada@example.org is set but slurm_mail_type is not, so no mail is sent: set slurm_mail_type, "
        "such as END,FAIL.",
        "slurm_sbatch_options: bogus is not an option of sbatch (or one the module sets itself: job name, comment, "
        "chdir, parsable, wait): see `man sbatch`.",
        "slurm_sbatch_options: gres is one the collection sets for every job: set slurm_gpus_per_node, slurm_gpu_type "
        "and slurm_gpu_request instead.",
        "slurm_sbatch_options: nice=[1] must be a string or number on one line, or true for a flag (false or null: "
        "leave it out).",
        "slurm_sbatch_options: output is one the collection sets itself (logs/%x-%j.out in the run directory, which "
        "the watch reads): leave it out.",
        "slurm_sbatch_options: requeue is one the collection sets for every job: set run_requeue_max (how often the "
        "jobs requeue themselves) instead."]
    assert inputs.validate(dict(slurm_sbatch_options=["nice=10"]))[0].startswith(
        "slurm_sbatch_options=['nice=10'] must be a mapping of sbatch long options")
    assert inputs.validate(dict(slurm_mail_type="END,BOGUS"))[0].startswith("slurm_mail_type='END,BOGUS' must be")


def test_every_option_the_collection_sets_is_an_sbatch_option_and_owned_by_a_variable_or_the_collection():
    from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm.sbatch_argv import COLLECTION_OPTIONS, SBATCH_OPTIONS
    assert sorted(set(COLLECTION_OPTIONS) - SBATCH_OPTIONS) == []
    for option, owner in COLLECTION_OPTIONS.items():
        assert owner.startswith("the collection (") or owner.split(" ", maxsplit=1)[0].rstrip(",").startswith(
            ("slurm_", "run_", "pretrain_")), option


@pytest.mark.parametrize("url, said", [
    ("https://hooks.slack.com/services/T000/B000/SECRET\tTOKEN", "a tab"),
    ("https://hooks.slack.com/services/T000/B000/SECRET TOKEN", "a space"),
    ("https://hooks.slack.com/services/T000/B000/SECRETTOKEN\r", "a carriage return"),
    ("https://hooks.slack.com/services/T000/B000/SECRETTOKEN\n", "a line break"),
    ("https://hooks.slack.com/services/T000/B000/SECRET\x1b]52;c;TOKEN", "a control character"),
    ("https://hooks.slack.com/services/T000/B000/SECRET\u00a0TOKEN", "a character outside ASCII"),
])
def test_a_webhook_url_with_a_blank_or_a_control_is_refused_by_host_never_shown(url, said):
    errors = inputs.validate(dict(GOOD, run_notify=[dict(url="https://example.com/ok"), dict(url=url)]))
    assert errors == [
        "run_notify[1].url (to hooks.slack.com) has %s, which a URL cannot hold: remove it (often a blank or line "
        "break copied with the URL, at its end) or percent-encode it (%%20 for a space). The URL is not shown "
        "here: it holds a token." % said]
    assert "SECRET" not in errors[0] and "TOKEN" not in errors[0]


def test_a_webhook_url_whose_host_is_not_printable_is_named_by_its_index_alone():
    errors = inputs.validate(dict(GOOD, run_notify=[dict(url="https://hooks.slack\t.com/services/T000/B000/SECRET"),
                                                    dict(url="https://hooks slack.com/services/SECRET")]))
    assert [e.split(" has ")[0] for e in errors] == ["run_notify[0].url", "run_notify[1].url"]
    assert not any("slack" in e or "SECRET" in e for e in errors)
