# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run directory on the controller's side: done records, the pipeline's record, runs' status,
paths, the report's facts and the report, the ledger, files put and fetched, trusted directories,
your code's tree and its sync, the container, the node package."""
