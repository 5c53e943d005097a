"""The loops that act: the scheduler tick, dependency releases, log followers, samples."""
