"""Fault drills: scenarios as YAML, a runner that injects faults and checks what the cluster does, reports."""
