"""The contract's data: annotations, workload kinds, the decision record, and the
Kubernetes shapes around them (Pods, JSON Patch, AdmissionReview, a cluster's JSON).

Every layer above reads these definitions instead of spelling a key, a kind or a path
itself. `Manifest` is what every layer calls a Kubernetes object read as JSON.
"""

from typing import Any

Manifest = dict[str, Any]
