import sys

from argus_client.cli.main import main

sys.exit(main())
