# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Let ansible-test make its virtual environments where only PyPI is reachable.

ansible-test creates each sanity (and units) environment without pip, then runs a
get-pip.py that it downloads from ci-files.testing.ansible.com and caches as
~/.ansible/test/cache/get_pip_<version>.py. Where that host cannot be reached, this writes
the cache file itself: a short script that runs the same pip version from its wheel (from
PyPI, through the ordinary pip client) to install that pip and the packages ansible-test
asks for. An existing cache file is left as it is.

    python tools/ansible_test_pip.py       # prints the path of the cache file
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

STAND_IN = '''"""Stand-in for get-pip.py %(version)s, written by tools/ansible_test_pip.py: installs pip
%(version)s from its wheel, then the packages named on the command line."""
import os
import runpy
import sys

WHEEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), %(wheel)r)
# get-pip.py options that pip install does not know
ARGS = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
sys.path.insert(0, WHEEL)
sys.argv = ["pip", "install", "--upgrade", "--force-reinstall"] + ARGS
runpy.run_module("pip", run_name="__main__", alter_sys=True)
'''


def pip_version():
    """The pip version ansible-test bootstraps into its environments."""
    from ansible_test._internal.python_requirements import get_venv_packages  # pylint: disable=import-outside-toplevel

    class Python:  # pylint: disable=too-few-public-methods
        version = "%d.%d" % sys.version_info[:2]

    return get_venv_packages(Python())["pip"]


def main():
    version = pip_version()
    cache = os.path.expanduser("~/.ansible/test/cache")
    target = os.path.join(cache, "get_pip_%s.py" % version.replace(".", "_"))
    if not os.path.exists(target):
        os.makedirs(cache, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as download:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                            "--dest", download, "pip==%s" % version], check=True)
            (wheel,) = os.listdir(download)
            os.replace(os.path.join(download, wheel), os.path.join(cache, wheel))
        with open(target + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(STAND_IN % dict(version=version, wheel=wheel))
        os.replace(target + ".tmp", target)
    print(target)


if __name__ == "__main__":
    main()
