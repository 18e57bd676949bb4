"""Workloads of GPU operators as their projects' samples write them, for the preview and
template-shape tests."""

from __future__ import annotations

# KubeRay's ray-cluster.sample.yaml, with a GPU worker group.
RAYCLUSTER = """\
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: raycluster-kuberay
  namespace: ml
  annotations:
    castops.io/optimize: "true"
spec:
  rayVersion: '2.46.0'
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers:
          - name: ray-head
            image: rayproject/ray:2.46.0
            resources:
              limits: {cpu: 1, memory: 2G}
  workerGroupSpecs:
    - replicas: 1
      groupName: gpu-group
      rayStartParams: {}
      template:
        metadata:
          annotations:
            castops.io/optimize: "true"
            castops.io/workload-type: inference
        spec:
          containers:
            - name: ray-worker
              image: rayproject/ray:2.46.0-gpu
              resources:
                limits: {cpu: 1, memory: 1G, nvidia.com/gpu: 1}
    - replicas: 1
      groupName: cpu-group
      rayStartParams: {}
      template:
        metadata:
          annotations:
            castops.io/optimize: "true"
        spec:
          containers:
            - name: ray-worker
              image: rayproject/ray:2.46.0
"""
