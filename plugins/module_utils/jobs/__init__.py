# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Each Slurm job of a run as one Python class per stage (base.py: the Job, the Run it belongs to,
the lines most jobs share; stages.py: the stages by name)."""
