"""The contract's data: annotations, workload kinds, the decision record, and the
Kubernetes shapes around them (Pods, JSON Patch, AdmissionReview, a cluster's JSON).

Built on settings alone; every layer above reads these definitions instead of
spelling a key, a kind or a path itself.
"""
