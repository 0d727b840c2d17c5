# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""After training: what the play says of the export and its loss, a serving job's endpoint, the batch's
prompts file."""
