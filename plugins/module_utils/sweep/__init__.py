# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Sweeps: many runs from one inventory (members.py: a sweep's members from the sweep variable)."""
