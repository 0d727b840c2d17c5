import pytest

from ansible_collections.llmtrain.slurm.plugins.module_utils import sbatch_argv
from ansible_collections.llmtrain.slurm.tests.unit.plugins.modules.fake_slurm import fixture


def test_parsable_output():
    assert sbatch_argv.parse_parsable(fixture("sbatch_parsable.txt")) == "16"
    assert sbatch_argv.parse_parsable("42;cluster2\n") == "42"
    with pytest.raises(ValueError):
        sbatch_argv.parse_parsable("")


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
