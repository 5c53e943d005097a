"""SQLite: every write (one writer, guarded compare-and-set), every read, the lanes that run
them.
"""
