"""The golden helpers (golden.py) import as a module of this directory."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
