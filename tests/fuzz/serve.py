"""``argus-api`` as it runs in production (``service.main``'s wiring and server, with its
limits), on a fake cluster instead of Ray: the process the fuzz tier and
``bench/bench_hostile.py`` attack.

    python tests/fuzz/serve.py --config FILE --port N    (token in ARGUS_API_TOKEN)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from service.cluster.fake import FakeCluster
from service.config_load import load_settings
from service.main import LOG_FORMAT, build_service, scrub_secret, serve
from service.web.http_server import ServerLimits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, stream=sys.stderr)
    settings = load_settings(args.config).with_overrides(api_port=args.port)
    cluster = FakeCluster()
    cluster.add_node("w1", gpus=8)  # a 1x1 task fits: submits reach the scheduler's claim
    token = os.environ["ARGUS_API_TOKEN"]
    if not scrub_secret("ARGUS_API_TOKEN"):  # as argus-api does (service.main)
        raise SystemExit("could not clear the token from /proc/self/environ")
    app = build_service(settings, token, cluster)
    serve(app, "127.0.0.1", args.port, ServerLimits.from_settings(settings))


if __name__ == "__main__":
    main()
