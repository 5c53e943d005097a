#!/usr/bin/env python3
"""``argus-node`` inside the argus-ray-node image (installed as /usr/local/bin/argus-node).

The same ``raypool.cli:main`` that ``pip install`` registers as the ``argus-node`` console
script on a plain host. In the image raypool lives in /opt/argus/raypool, importable
through a .pth file the Dockerfile writes (the image never pip-installs the repository,
whose pyproject builds the task service too).
"""

import sys

from raypool.cli import main

if __name__ == "__main__":
    sys.exit(main())
