# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A training's progress: its metrics, its log's progress lines, the Hugging Face Trainer's state, the
total steps your script's arguments set."""
