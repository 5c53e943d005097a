"""The scheduling policy: the planner and its rules, fair share, reservations, preemption.
Pure.
"""
