"""Program logging: every line to stdout (supervisord forwards it to ``docker logs``) and to
``ARGUS_LOG_DIR/<node>/<program>.log`` (shared storage, survives the container)."""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys

from raypool.config import NodeSettings

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"


def setup_logging(settings: NodeSettings, program: str) -> logging.Logger:
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(logging.INFO)
    formatter = logging.Formatter(FORMAT)
    stream = logging.StreamHandler(sys.stdout)
    stream.setFormatter(formatter)
    root.addHandler(stream)
    logger = logging.getLogger(f"{settings.node_name}.{program}")
    try:
        os.makedirs(settings.node_log_dir, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            os.path.join(settings.node_log_dir, f"{program}.log"),
            maxBytes=20 * 1024 * 1024, backupCount=3)
    except OSError as exc:
        logger.warning("logging to stdout only: cannot write %s: %s",
                       settings.node_log_dir, exc)
        return logger
    handler.setFormatter(formatter)
    root.addHandler(handler)
    return logger
