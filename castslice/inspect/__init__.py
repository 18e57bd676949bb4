"""Tools that read a live cluster or a workload: the checks behind `castslice doctor`, the
savings behind `castslice report`, and the GPU estimate behind `castslice plan`."""
