# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local cluster's helpers: network namespaces, pidfile daemons, a release's root."""
