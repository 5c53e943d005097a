"""Write the OpenAPI document the service serves to clients/openapi.json (or check it).

    python3 scripts/openapi_export.py          # rewrite clients/openapi.json
    python3 scripts/openapi_export.py --check  # exit 1 when it differs from the service's

The document is the same for every deployment (no configured paths in it), so clients
can be generated from the committed file without a running service:

    openapi-python-client generate --path clients/openapi.json --meta none
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.web.openapi import build_openapi  # noqa: E402 - after the path is set

COMMITTED = ROOT / "clients" / "openapi.json"


def document_text() -> str:
    """The served document, as the committed file holds it (sorted, indented)."""
    return json.dumps(build_openapi(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = document_text()
    if argv[1:] == ["--check"]:
        if COMMITTED.read_text(encoding="utf-8") != text:
            print(f"{COMMITTED} is not the served document: run "
                  "python3 scripts/openapi_export.py", file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    COMMITTED.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
