"""Stand-in for ``python3 -m verl.trainer.main_ppo`` (NOT verl); see the README."""

import sys

from verl.trainer.standin import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], trainer="main_ppo"))
