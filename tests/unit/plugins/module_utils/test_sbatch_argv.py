import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils.slurm import sbatch_argv
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import fixture


def test_parsable_output():
    assert sbatch_argv.parse_parsable(fixture("sbatch_parsable.txt")) == "16"
    assert sbatch_argv.parse_parsable("42;cluster2\n") == "42"
    with pytest.raises(ValueError):
        sbatch_argv.parse_parsable("")
    for printed in ("\u0664\u0662\n", "\u00b2;cluster2\n"):  # Arabic-Indic 42, a superscript 2: no job id
        with pytest.raises(ValueError, match="sbatch printed no job id"):
            sbatch_argv.parse_parsable(printed)


def test_fingerprint_depends_on_every_part():
    base = dict(name="a", content="#!/bin/sh\n", options={"nodes": 1}, env={"X": "1"}, chdir=None)
    fp = sbatch_argv.fingerprint(**base)
    assert len(fp) == 16 and fp == sbatch_argv.fingerprint(**dict(base))
    for key, value in [("name", "b"), ("content", "#!/bin/bash\n"), ("options", {"nodes": 2}),
                       ("env", {"X": "2"}), ("chdir", "/tmp")]:
        assert sbatch_argv.fingerprint(**dict(base, **{key: value})) != fp
    assert sbatch_argv.fingerprint_of_comment(sbatch_argv.identity_comment(fp)) == fp
    assert sbatch_argv.fingerprint_of_comment("something else") is None


def test_option_argv():
    assert sbatch_argv.option_argv({"cpus_per_task": 2, "exclusive": True, "hold": False, "time": "00:05:00",
                                    "partition": "debug;touch x"}) == [
        "--cpus-per-task=2", "--exclusive", "--partition=debug;touch x", "--time=00:05:00"]


@pytest.mark.parametrize("options, message", [
    ({"bogus": 1}, "bogus is not an sbatch option"),
    ({"nodes;rm": 1}, "is not an option name"),
    ({"--nodes": 1}, "is not an option name"),
    ({"Nodes": 1}, "is not an option name"),
    ({"job-name": "x"}, "name option"),
    ({"comment": "x"}, "identity"),
    ({"nodes": [1, 2]}, "must be a string"),
])
def test_bad_options(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        sbatch_argv.option_argv(options)


def test_export_argv():
    env = {"B": "x,y", "A": "1"}
    assert sbatch_argv.export_argv(None, env) == ["--export=ALL"]
    assert sbatch_argv.export_argv("ALL,FOO", env) == ["--export=ALL,FOO"]
    assert sbatch_argv.export_argv("NONE", env) == ["--export=A,B"]
    assert sbatch_argv.export_argv("NONE", {}) == ["--export=NONE"]
    assert sbatch_argv.export_argv("PATH,HOME", env) == ["--export=PATH,HOME,A,B"]
    with pytest.raises(ValueError, match="env key .A=B. is not an environment variable name"):
        sbatch_argv.export_argv(None, {"A=B": "1"})


def test_kept_script_has_the_options_as_directives_after_the_first_line():
    options = sbatch_argv.option_argv({"nodes": "3", "output": "logs/%x-%j.out", "requeue": True,
                                       "signal": "USR2@300", "constraint": 'h100&"ib"'})
    kept = sbatch_argv.kept_script("#!/usr/bin/env bash\n# body\nsrun true\n", "llmtrain-demo", "/w/demo run",
                                   options + ["--export=ALL"])
    lines = kept.splitlines()
    assert lines[0] == "#!/usr/bin/env bash" and lines[-2:] == ["# body", "srun true"]
    directives = [line for line in lines if line.startswith("#SBATCH ")]
    assert directives == [
        "#SBATCH --job-name=llmtrain-demo",
        '#SBATCH --chdir="/w/demo run"',
        '#SBATCH --constraint="h100&\\"ib\\""',
        "#SBATCH --nodes=3",
        "#SBATCH --output=logs/%x-%j.out",
        "#SBATCH --requeue",
        "#SBATCH --signal=USR2@300",
        "#SBATCH --export=ALL",
    ]
    # sbatch stops reading directives at the first command: they all come before the body's
    assert lines.index("srun true") > max(lines.index(line) for line in directives)


def test_kept_script_names_what_no_directive_can_carry():
    kept = sbatch_argv.kept_script("echo\n", "a\nb", None, ["--comment=x\\y"])
    assert "#SBATCH --job-name" not in kept and "\nb" not in kept.replace("\necho", "")
    assert "# (--job-name: not writable as a directive; give it to sbatch)" in kept
    assert "# (--comment: not writable as a directive; give it to sbatch)" in kept
    assert kept.endswith("\necho\n")
