"""The run's container: the words each job starts its Python with, and what is refused before a job."""

import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.rundir import container
from ansible_collections.llmtrain.slurm.plugins.module_utils.inputs import validate

WS = "/shared/runs"


def cfg(runtime, image="/shared/images/torch", mounts=(), args=()):
    return dict(runtime=runtime, image=image, mounts=list(mounts), args=list(args), workspace=WS)


def test_no_container_adds_nothing():
    assert container.argv(cfg("none", image=None), "/x") == dict(step=[], task=[], batch=[])


def test_pyxis_steps_get_the_image_mounts_workdir_and_one_container_per_job():
    got = container.argv(cfg("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3", ["/datasets:/data:ro", "/scratch"],
                             ["--no-container-mount-home"]), WS + "/r/scripts")
    step = ["--container-image=nvcr.io#nvidia/pytorch:25.01-py3",
            "--container-mounts=/shared/runs:/shared/runs,/datasets:/data:ro,/scratch:/scratch",
            "--container-workdir=/shared/runs/r/scripts", "--container-name=llmtrain", "--no-container-mount-home"]
    assert got["step"] == step and got["task"] == []
    # a command of the batch script runs as a one-task step of its own in the same container
    assert got["batch"] == ["srun", "--ntasks=1", "--nodes=1", "--overlap", "--job-name=in-container"] + step


def test_charliecloud_runs_each_command_through_ch_run():
    got = container.argv(cfg("charliecloud", mounts=["/datasets", "/home/ada/venv:/opt/venv"], args=["--set-env"]),
                         WS + "/r/scripts")
    task = ["ch-run", "-b", WS, "-b", "/datasets", "-b", "/home/ada/venv:/opt/venv", "--set-env",
            "--cd", WS + "/r/scripts", "/shared/images/torch", "--"]
    assert got == dict(step=[], task=task, batch=task)


@pytest.mark.parametrize("values, message", [
    (dict(slurm_container_runtime="docker"), "slurm_container_runtime='docker' must be one of none, pyxis, charliecloud"),
    (dict(slurm_container_image="/i"), "slurm_container_image is set but slurm_container_runtime is none"),
    (dict(slurm_container_runtime="pyxis"), "slurm_container_runtime=pyxis needs slurm_container_image: an enroot"),
    (dict(slurm_container_runtime="pyxis", slurm_container_image="a b"), "slurm_container_image='a b' is not an enroot"),
    (dict(slurm_container_runtime="charliecloud", slurm_container_image="/i", slurm_container_mounts=["data"]),
     "slurm_container_mounts: 'data' is not a mount: SOURCE[:TARGET], both absolute paths"),
    (dict(slurm_container_runtime="charliecloud", slurm_container_image="/i", slurm_container_mounts=["/d:/d:ro"]),
     "slurm_container_mounts: '/d:/d:ro' has mount flags (ro), which ch-run does not take"),
    (dict(slurm_container_runtime="pyxis", slurm_container_image="i", slurm_container_mounts=["/a,/b"]),
     "slurm_container_mounts: '/a,/b' is not a mount: SOURCE[:TARGET[:FLAGS]]"),
    (dict(slurm_container_runtime="pyxis", slurm_container_image="i", slurm_container_args=["--container-mounts=/x"]),
     "slurm_container_args: --container-mounts is what slurm_container_mounts says: set that instead."),
    (dict(slurm_container_runtime="charliecloud", slurm_container_image="/i", slurm_container_args=["--cd"]),
     "slurm_container_args: --cd is set by the collection (each job's working directory): leave it out."),
])
def test_bad_container_settings_are_refused_naming_the_variable(values, message):
    found = container.input_errors(values)
    assert any(m.startswith(message) for m in found), found
    assert any(m.startswith(message) for m in validate(values))  # the run's input check says it too


def test_good_container_settings_pass():
    assert container.input_errors(dict(slurm_container_runtime="pyxis", slurm_container_image="nvcr.io#nvidia/pytorch:25.01-py3",
                                       slurm_container_mounts=["/datasets:/data:ro"])) == []
    assert container.input_errors(dict(slurm_container_runtime="none", slurm_container_mounts=[])) == []


@pytest.mark.parametrize("runtime", ["pyxis", "charliecloud"])
@pytest.mark.parametrize("workspace", ["/shared/a,/home/bob:/shared/a", "/shared/ws:/etc", "/shared/a,b"])
def test_a_workspace_the_runtime_would_split_is_refused(runtime, workspace):
    """pyxis splits its mounts at , and each at :, so /shared/a,/home/bob:/shared/a would add a mount;
    ch-run -b splits at :, so /shared/ws:/etc would mount the workspace on /etc."""
    values = dict(slurm_container_runtime=runtime, slurm_container_image="/i", slurm_workspace=workspace)
    message = "slurm_workspace=%r is mounted in the container, and a mount's path may not contain , or :" % workspace
    assert any(m.startswith(message) for m in container.input_errors(values))
    assert any(m.startswith(message) for m in validate(values))


@pytest.mark.parametrize("runtime", ["pyxis", "charliecloud"])
def test_an_image_that_reads_as_an_option_is_refused(runtime):
    found = container.input_errors(dict(slurm_container_runtime=runtime, slurm_container_image="-w"))
    assert found == ["slurm_container_image='-w' starts with -, like an option: give the image by a path or name "
                     "that does not, such as its absolute path."]


@pytest.mark.parametrize("runtime, arg, option, owner", [
    # srun takes any unambiguous prefix of a long option, as getopt_long does
    ("pyxis", "--container-im=evil", "--container-image", "is what slurm_container_image says"),
    ("pyxis", "--container-wo=/", "--container-workdir", "is set by the collection (each job's working directory)"),
    ("pyxis", "--container-n", "--container-name", "is set by the collection (one container per node and job)"),
    # ch-run (argp): prefixes, a short option's value attached, and the last of a bundle of flags
    ("charliecloud", "--b=/etc:/x", "--bind", "is what slurm_container_mounts says"),
    ("charliecloud", "--bi", "--bind", "is what slurm_container_mounts says"),
    ("charliecloud", "--c=/x", "--cd", "is set by the collection (each job's working directory)"),
    ("charliecloud", "-b/etc:/x", "-b", "is what slurm_container_mounts says"),
    ("charliecloud", "-bX", "-b", "is what slurm_container_mounts says"),
    ("charliecloud", "-c/dir", "-c", "is set by the collection (each job's working directory)"),
    ("charliecloud", "-wb/etc", "-b", "is what slurm_container_mounts says"),
    ("charliecloud", "-jtc/x", "-c", "is set by the collection (each job's working directory)"),
])
def test_an_owned_option_is_refused_in_every_form_the_runtime_reads(runtime, arg, option, owner):
    values = dict(slurm_container_runtime=runtime, slurm_container_image="/i", slurm_container_args=["-v", arg])
    program = "srun" if runtime == "pyxis" else "ch-run"
    message = "slurm_container_args: %s (%s takes it as %s) %s" % (arg, program, option, owner)
    found = [m for m in container.input_errors(values) if m.startswith("slurm_container_args")]
    assert len(found) == 1 and found[0].startswith(message), found  # -v is no owned option
    assert any(m.startswith(message) for m in validate(values))


# srun's own --container (an OCI bundle) is a whole name, not an abbreviation of pyxis's options
PYXIS_ARGS = ["--container-env=NCCL_DEBUG", "--container-writable", "--no-container-mount-home",
              "--container-mount-home", "--container-remap-root", "--container=/bundle"]
# -u and -W take the rest of their word as its value: no -b or -c there
CH_RUN_ARGS = ["-w", "--write", "--set-env=HOME=/x", "--set-env", "--unset-env=PYTHON*", "--unset-env", "X",
               "-ub", "-Wc", "-jt", "--write-fake"]
IMAGE = "/shared/images/torch"


@pytest.mark.parametrize("runtime, args, words", [
    ("pyxis", PYXIS_ARGS, dict(step=["--container-image=" + IMAGE, "--container-mounts=%s:%s" % (WS, WS),
                                     "--container-workdir=%s/r" % WS, "--container-name=llmtrain"] + PYXIS_ARGS)),
    ("charliecloud", CH_RUN_ARGS, dict(task=["ch-run", "-b", WS] + CH_RUN_ARGS + ["--cd", WS + "/r", IMAGE, "--"])),
])
def test_options_the_collection_does_not_set_pass_and_reach_the_runtime(runtime, args, words):
    values = dict(slurm_container_runtime=runtime, slurm_container_image=IMAGE, slurm_workspace=WS,
                  slurm_container_args=args)
    assert container.input_errors(values) == []
    got = container.argv(container.settings(values), WS + "/r")
    assert {key: got[key] for key in words} == words


def runner(answers):
    calls = []

    def run(argv):
        calls.append(argv)
        return answers.get(argv[0], (127, "", "not found"))

    run.calls = calls
    return run


def test_pyxis_needs_the_plugin_in_srun():
    errors, _notes = container.preflight(cfg("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3"),
                                         runner({"srun": (0, "Usage: srun [OPTIONS(0)...]\n  --overlap\n", "")}))
    assert errors and errors[0].startswith("slurm_container_runtime=pyxis, but srun on this node has no --container-image")
    errors, _notes = container.preflight(cfg("pyxis", "nvcr.io#nvidia/pytorch:25.01-py3"),
                                         runner({"srun": (0, "  --container-image=[USER@][REGISTRY#]IMAGE[:TAG]|PATH\n", "")}))
    assert errors == []


def test_charliecloud_image_needs_sh_and_every_mount_target(tmp_path):
    image = tmp_path / "img"
    (image / "bin").mkdir(parents=True)
    (image / "bin" / "sh").write_text("")
    (image / WS.lstrip("/")).mkdir(parents=True)
    errors, notes = container.preflight(cfg("charliecloud", str(image), ["/datasets"]), runner({"ch-run": (0, "0.31", "")}))
    assert errors == ["slurm_container_image=%s has no directory /datasets to mount /datasets on: ch-run mounts only onto "
                      "directories the image has. Make it in the image (mkdir -p %s/datasets), or let ch-run write the "
                      "image (slurm_container_args: [-w])." % (image, image)]
    assert notes == []
    (image / "datasets").mkdir()
    assert container.preflight(cfg("charliecloud", str(image), ["/datasets"]), runner({}))[0] == []
    # ch-run missing here: said, not refused (the nodes may have it)
    assert "ch-run is not on this node's PATH" in container.preflight(cfg("charliecloud", str(image)), runner({}))[1][0]
    # -w: ch-run makes the targets
    assert container.preflight(cfg("charliecloud", str(image), ["/elsewhere"], ["-w"]), runner({}))[0] == []
    (image / "bin" / "sh").unlink()
    assert "has no /bin/sh" in container.preflight(cfg("charliecloud", str(image)), runner({}))[0][0]
    missing = container.preflight(cfg("charliecloud", str(tmp_path / "nope")), runner({}))[0]
    assert missing[0].startswith("slurm_container_image=%s does not exist here" % (tmp_path / "nope"))
