"""Stand-in for ``python3 -m verl.trainer.sft_trainer_ray`` (NOT verl); see the README."""

import sys

from verl.trainer.standin import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], trainer="sft_trainer_ray"))
