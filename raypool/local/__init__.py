"""The multi-node launcher on one host (`argus-node local`), for development and tests."""
