"""The loops that act: the scheduler tick, dependency releases, log followers, webhook
deliveries, samples."""
