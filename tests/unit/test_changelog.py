"""CHANGELOG.md is what antsibull-changelog makes of changelogs/, and no fragment is left out."""

import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ANTSIBULL_CHANGELOG = os.path.join(os.path.dirname(sys.executable), "antsibull-changelog")
HINT = "run `make changelog` and commit CHANGELOG.md and changelogs/changelog.yaml"


def test_every_fragment_is_in_a_release_entry():
    with open(os.path.join(ROOT, "changelogs", "changelog.yaml"), encoding="utf-8") as handle:
        changes = yaml.safe_load(handle)
    recorded = {name for release in changes["releases"].values() for name in release.get("fragments", [])}
    fragments = {name for name in os.listdir(os.path.join(ROOT, "changelogs", "fragments")) if name.endswith(".yml")}
    assert fragments and sorted(fragments - recorded) == [], HINT


def test_changelog_md_is_generated_from_changelog_yaml(tmp_path):
    output = tmp_path / "CHANGELOG.md"
    subprocess.run([ANTSIBULL_CHANGELOG, "generate", "--output", str(output), "--output-format", "md"], cwd=ROOT,
                   check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with open(os.path.join(ROOT, "CHANGELOG.md"), encoding="utf-8") as handle:
        assert handle.read() == output.read_text(encoding="utf-8"), HINT
