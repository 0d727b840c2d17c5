"""Loaded by Python at start-up from PYTHONPATH: the trainer faults the environment asks for."""

import trainer_faults

trainer_faults.install_on_import()
