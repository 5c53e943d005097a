"""The Ray boundary: the protocol, the fake, the Ray Jobs SDK adapter."""
