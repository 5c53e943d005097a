"""The facts every layer shares: task states, ids, users, typed rows, times, file layout,
workloads. Pure.
"""
