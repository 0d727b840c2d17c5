# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run's container (slurm_container_*): how each job runs its Python in it, and what is
checked of it before any job is submitted.

Every Python the jobs of a run start (the node and network checks, the data preparation, the
venv, the training, the samples) runs in the image when slurm_container_runtime is set, and
slurm_python is the interpreter inside it. The workspace is mounted at its own path, so every
path a job names is the same inside and out. Three prefixes say how (argv):

- step: srun options of a job step (pyxis: --container-image, --container-mounts,
  --container-workdir, and --container-name, so that the image is imported once per node and
  job, not once per step);
- task: what a step's task runs its command through (charliecloud: ch-run -b ... IMAGE --);
- batch: what the batch script runs a command on its own node through (pyxis: a one-task srun
  step with the step options; charliecloud: ch-run).

With no runtime all three are empty and the commands run as they always did.
"""

from __future__ import annotations

import os

RUNTIMES = ("none", "pyxis", "charliecloud")
# pyxis keeps a named container for the rest of the job: the first step imports the image, the
# others start in it
CONTAINER_NAME = "llmtrain"
# the options each runtime's command line takes from the collection, and what sets them
OWNED = {
    "pyxis": {"--container-image": "slurm_container_image", "--container-mounts": "slurm_container_mounts",
              "--container-workdir": "the collection (each job's working directory)",
              "--container-name": "the collection (one container per node and job)"},
    "charliecloud": {"-b": "slurm_container_mounts", "--bind": "slurm_container_mounts",
                     "-c": "the collection (each job's working directory)",
                     "--cd": "the collection (each job's working directory)"},
}
# ch-run options that make the image writable: bind targets missing in it are then made
CH_WRITABLE = ("-w", "--write")
# the program that parses each runtime's options (slurm_container_args)
PARSER = {"pyxis": "srun", "charliecloud": "ch-run"}
# pyxis splits --container-mounts at "," and each mount at ":", ch-run splits -b at ":": a path with
# either would mount something else. One rule for both runtimes, so that a path means the same in each.
MOUNT_SEPARATORS = ",:"
# ch-run's short options that take a value (-W an optional one): in a bundle such as -wb/etc the rest of
# the word after one of them is that value, not more options. pyxis's owned options are long only.
CH_VALUE_LETTERS = "bcgmsuW"
# the runtime's own long options whose whole name starts an owned one: getopt_long takes a whole name as
# itself before it looks at abbreviations (srun's --container is an OCI bundle, not pyxis's image)
WHOLE_NAMES = {"pyxis": ("--container",), "charliecloud": ()}


def settings(values):
    """The slurm_container_* variables and slurm_workspace -> the dict the argv functions take."""
    return dict(runtime=values.get("slurm_container_runtime") or "none", image=values.get("slurm_container_image"),
                mounts=list(values.get("slurm_container_mounts") or []), args=list(values.get("slurm_container_args") or []),
                workspace=str(values.get("slurm_workspace") or "").rstrip("/") or "/")


def binds(cfg):
    """[(source, target, flags)] of the container: the workspace at its own path first."""
    found = [(cfg["workspace"], cfg["workspace"], "")]
    for mount in cfg["mounts"]:
        parts = str(mount).split(":")
        source = parts[0]
        target = parts[1] if len(parts) > 1 and parts[1] else source
        found.append((source, target, ":".join(parts[2:])))
    return found


def argv(cfg, workdir):
    """{step, task, batch}: the prefixes of module docstring, for a job whose commands run in workdir."""
    runtime = cfg.get("runtime") or "none"
    if runtime == "pyxis":
        mounts = ",".join("%s:%s%s" % (s, t, ":" + f if f else "") for s, t, f in binds(cfg))
        step = ["--container-image=%s" % cfg["image"], "--container-mounts=%s" % mounts,
                "--container-workdir=%s" % workdir, "--container-name=%s" % CONTAINER_NAME] + list(cfg["args"])
        return dict(step=step, task=[], batch=["srun", "--ntasks=1", "--nodes=1", "--overlap", "--job-name=in-container"]
                    + step)
    if runtime == "charliecloud":
        task = ["ch-run"]
        for source, target, _flags in binds(cfg):
            task += ["-b", source if source == target else "%s:%s" % (source, target)]
        task += list(cfg["args"]) + ["--cd", workdir, str(cfg["image"]), "--"]
        return dict(step=[], task=task, batch=task)
    return dict(step=[], task=[], batch=[])


def owned_option(runtime, arg):
    """The OWNED option of runtime that the word arg sets, as the runtime's parser reads it -> the
    option's name in OWNED, or None.

    srun (getopt_long) and ch-run (argp, on getopt_long) take a long option by any prefix of its name
    that no other option shares, its value after = or in the next word (--container-im=X, --b X), and
    a short option with its value attached (-b/etc:/x) or at the end of a bundle of flags (-wb/etc).
    Every non-empty prefix of an owned long name counts as that option: a prefix another option shares
    is ambiguous, which the runtime refuses anyway, so refusing it here turns nothing that works away.
    The one exception is the whole name of another option (WHOLE_NAMES), which is that option."""
    owned = OWNED[runtime]
    if arg.startswith("--"):
        name = arg.split("=", 1)[0]
        if name == "--" or name in WHOLE_NAMES[runtime]:
            return None
        return next((option for option in owned if option.startswith(name)), None)
    if arg.startswith("-"):
        for letter in arg[1:]:
            if "-" + letter in owned:
                return "-" + letter
            if letter in CH_VALUE_LETTERS:
                break
    return None


def input_errors(values):
    """What the slurm_container_* variables say wrong on their own -> [message]."""
    runtime = values.get("slurm_container_runtime") or "none"
    image = values.get("slurm_container_image")
    found = []
    if runtime not in RUNTIMES:
        return ["slurm_container_runtime=%r must be one of %s." % (runtime, ", ".join(RUNTIMES))]
    if runtime == "none":
        for name in ("slurm_container_image", "slurm_container_mounts", "slurm_container_args"):
            if values.get(name):
                found.append("%s is set but slurm_container_runtime is none, so no job runs in a container: set "
                             "slurm_container_runtime to pyxis or charliecloud, or leave %s out." % (name, name))
        return found
    if not (isinstance(image, str) and image.strip() and "\n" not in image and "\0" not in image):
        found.append("slurm_container_runtime=%s needs slurm_container_image: %s." % (runtime, (
            "an enroot image URI such as nvcr.io#nvidia/pytorch:25.01-py3, or the path of a SquashFS file on the "
            "shared filesystem" if runtime == "pyxis" else
            "the path of an image directory or SquashFS file on the shared filesystem (ch-convert makes one)")))
    elif image.startswith("-"):
        found.append("slurm_container_image=%r starts with -, like an option: give the image by a path or name "
                     "that does not, such as its absolute path." % image)
    elif runtime == "pyxis" and ("," in image or " " in image):
        found.append("slurm_container_image=%r is not an enroot image: [USER@][REGISTRY#]IMAGE[:TAG] or a path, "
                     "without blanks or commas." % image)
    workspace = str(values.get("slurm_workspace") or "")
    if any(separator in workspace for separator in MOUNT_SEPARATORS):
        found.append("slurm_workspace=%r is mounted in the container, and a mount's path may not contain , or : "
                     "(pyxis splits its mounts at both, ch-run at :): pick a workspace path without them."
                     % workspace)
    mounts = values.get("slurm_container_mounts") or []
    if not isinstance(mounts, list):
        found.append("slurm_container_mounts=%r must be a list of SOURCE[:TARGET] mounts, such as "
                     "[/datasets, \"/scratch/$USER:/scratch\"]." % (mounts,))
        mounts = []
    for mount in mounts:
        parts = str(mount).split(":")
        bad = (not isinstance(mount, str) or any(separator in part for part in parts for separator in MOUNT_SEPARATORS)
               or "\n" in mount or not 1 <= len(parts) <= 3
               or not parts[0].startswith("/") or len(parts) > 1 and parts[1] and not parts[1].startswith("/"))
        if bad:
            found.append("slurm_container_mounts: %r is not a mount: SOURCE[:TARGET%s], both absolute paths, no "
                         "commas." % (mount, "[:FLAGS]" if runtime == "pyxis" else ""))
        elif len(parts) == 3 and runtime == "charliecloud":
            found.append("slurm_container_mounts: %r has mount flags (%s), which ch-run does not take: write "
                         "SOURCE[:TARGET]." % (mount, parts[2]))
    args = values.get("slurm_container_args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) and a and "\n" not in a for a in args):
        found.append("slurm_container_args=%r must be a list of %s options, one word per item." % (
            args, PARSER[runtime]))
        args = []
    for arg in args:
        option = owned_option(runtime, arg)
        if not option:
            continue
        owner = OWNED[runtime][option]
        name = option if arg.split("=", 1)[0] == option else "%s (%s takes it as %s)" % (arg, PARSER[runtime], option)
        if owner.startswith("the collection"):
            found.append("slurm_container_args: %s is set by %s: leave it out." % (name, owner))
        else:
            found.append("slurm_container_args: %s is what %s says: set that instead." % (name, owner))
    return found


def preflight(cfg, runner):
    """What the login node can tell of the container before a job is submitted ->
    (errors, notes). runner(argv) -> (rc, stdout, stderr); a missing program is rc 127.

    pyxis: srun must know --container-image (the plugin is loaded through plugstack.conf; a
    job without it would fail at its first step). charliecloud: an image given as a path must
    exist (the nodes read it from the shared filesystem), and in a directory image every mount
    target must exist (ch-run mounts only onto directories the image has, unless it may write
    the image); ch-run itself is looked for here, and said when missing, since the nodes may
    have it where the login node does not."""
    errors, notes = [], []
    runtime, image = cfg.get("runtime") or "none", str(cfg.get("image") or "")
    if runtime == "pyxis":
        rc, out, err = runner(["srun", "--help"])
        if "--container-image" not in out + err:
            errors.append("slurm_container_runtime=pyxis, but srun on this node has no --container-image option "
                          "(srun --help, exit %d): the pyxis plugin is not loaded here (plugstack.conf). Ask the site "
                          "for pyxis and enroot, or set slurm_container_runtime to charliecloud or none." % rc)
        if image.startswith("/") and not os.path.isfile(image):
            errors.append("slurm_container_image=%s is a path, but no such file is here: pyxis reads a SquashFS "
                          "image from the shared filesystem (enroot import makes one), or give a registry image "
                          "such as nvcr.io#nvidia/pytorch:25.01-py3." % image)
    elif runtime == "charliecloud":
        if runner(["ch-run", "--version"])[0] == 127:
            notes.append("ch-run is not on this node's PATH: the jobs need it on the compute nodes "
                         "(Debian and Ubuntu: charliecloud-runtime); not checked there before the first job.")
        if not image.startswith("/"):
            notes.append("slurm_container_image=%s is not a path: ch-run looks it up in its image storage on each "
                         "node (CH_IMAGE_STORAGE); not checked here." % image)
        elif os.path.isdir(image):
            if not any(os.path.isfile(os.path.join(image, p)) for p in ("bin/sh", "usr/bin/sh")):
                errors.append("slurm_container_image=%s has no /bin/sh: the job steps run their commands through sh "
                              "in the image; use a full image (ch-image build, ch-convert)." % image)
            if not any(a in CH_WRITABLE for a in cfg.get("args") or []):
                for source, target, _flags in binds(cfg):
                    if not os.path.isdir(os.path.join(image, target.lstrip("/"))):
                        errors.append("slurm_container_image=%s has no directory %s to mount %s on: ch-run mounts only "
                                      "onto directories the image has. Make it in the image (mkdir -p %s%s), or let "
                                      "ch-run write the image (slurm_container_args: [-w])."
                                      % (image, target, source, image.rstrip("/"), target))
        elif not os.path.isfile(image):
            errors.append("slurm_container_image=%s does not exist here: ch-run reads the image (a directory or a "
                          "SquashFS file) from the shared filesystem on every node." % image)
    return errors, notes
