# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The local cluster's helpers: network namespaces, pidfile daemons, a release's root."""

# the states in which a node runs jobs: the cluster is up when sinfo shows each node in one of them
# (local_cluster_up looks, local_cluster_wait waits); a flag (idle*: not responding) is none of them
UP_STATES = ("idle", "mixed", "allocated", "completing", "reserved", "planned")
