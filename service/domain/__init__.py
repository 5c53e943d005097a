"""The facts every layer shares: task states, ids, users, typed rows, wait reasons, Ray's
resources and a driver's, an attempt's progress and curve points, times, file layout,
workloads. Pure; imports nothing of the service above it.
"""
