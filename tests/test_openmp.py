"""``import dpemb`` makes OpenMP threads sleep when idle (dpemb.openmp) where it still can,
and never overrides the user's own choice."""

from __future__ import annotations

import subprocess
import sys

from dpemb.openmp import prefer_passive_wait
from tests.conftest import subprocess_env

SHOW = "import os; {imports}; print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('GOMP_SPINCOUNT'))"


def policy_in_child(imports: str, **env: str) -> str:
    base = {k: v for k, v in subprocess_env().items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", SHOW.format(imports=imports)], capture_output=True, text=True,
                          env={**base, **env}, check=True)
    return done.stdout.strip()


def test_importing_dpemb_before_torch_sets_the_passive_policy():
    assert policy_in_child("import dpemb; import torch") == "PASSIVE None"
    assert policy_in_child("from dpemb.cli.main import main") == "PASSIVE None"  # the dpemb command


def test_the_users_choice_and_a_loaded_torch_are_left_alone():
    assert policy_in_child("import dpemb", OMP_WAIT_POLICY="ACTIVE") == "ACTIVE None"
    assert policy_in_child("import dpemb", GOMP_SPINCOUNT="1000") == "None 1000"
    assert policy_in_child("import torch; import dpemb") == "None None"  # too late: libgomp read it at load
    assert "torch" in sys.modules and prefer_passive_wait() is False
