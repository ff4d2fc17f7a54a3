"""TEST-ONLY entry point for torchrun: ``dpemb`` with a fault planted in the first attempt.

    torchrun --max-restarts 1 ... tests/training/torchrun_faulty.py train ... --resume auto

On torchrun's first attempt (TORCHELASTIC_RESTART_COUNT = 0) rank 1 dies when round 3
reaches it; on a restart nothing is planted. Used by tests/training/test_distributed.py
to show that torchrun restarts the job and ``--resume auto`` finishes it from the last
checkpoint. Never imported by dpemb itself.
"""

import os
import sys

from dpemb.cli.main import main
from dpemb.training import executor

if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
    real_run = executor.DistributedExecutor._run

    def dying_run(self, rnd, start, work, acc):
        if self.rank == 1 and rnd == 2:
            os._exit(3)
        return real_run(self, rnd, start, work, acc)

    executor.DistributedExecutor._run = dying_run

sys.exit(main())
