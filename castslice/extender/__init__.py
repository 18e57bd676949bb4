"""The fragmentation-aware scheduler extender: FGD's node score served to kube-scheduler."""
