# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Talking to Slurm: its client, the modules' base, its output parsed, the one wait loop, sbatch's
argv, a site's requirements."""
