"""Decisions from values: failures, retry, priorities, quotas, usage, dependencies, progress.
Pure.
"""
