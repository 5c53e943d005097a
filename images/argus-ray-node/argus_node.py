#!/usr/bin/env python3
"""``argus-node`` inside the argus-ray-node image (installed as /usr/local/bin/argus-node).

The image carries the raypool package alone, copied to /opt/argus/raypool: pip-installing
the repository would bring the task service along, and exporting PYTHONPATH=/opt/argus
would leak into every Ray worker and training job started under the node. So this
wrapper puts /opt/argus on its own ``sys.path`` and runs the same ``raypool.cli:main``
that ``pip install`` registers as the ``argus-node`` console script on a plain host.
"""

import sys

RAYPOOL_HOME = "/opt/argus"

if __name__ == "__main__":
    sys.path.insert(0, RAYPOOL_HOME)
    from raypool.cli import main

    sys.exit(main())
