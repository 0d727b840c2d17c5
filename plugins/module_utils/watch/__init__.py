# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A job watched: what a look at it returns, its starts and requeues, bad nodes out of a held job, the
checks' records, stragglers, the GPU check."""
