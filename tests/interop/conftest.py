import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "e2e"))
from sylvite_harness import BIN, REPO, Env  # noqa: E402

SALT3008 = Path(os.environ.get("SYLVITE_VENV", REPO / "build" / "venv")) / "bin"
SALT3007 = Path(os.environ.get("SYLVITE_VENV_3007", REPO / "build" / "venv-3007")) / "bin"


def pytest_configure(config):
    for exe in ("salt-master", "salt-minion", "salt", "salt-key", "salt-run", "salt-call"):
        if not (BIN / exe).exists():
            raise pytest.UsageError(f"{BIN / exe} is missing: build first (scripts/build.sh)")
        if not (SALT3008 / exe).exists():
            raise pytest.UsageError(f"real Salt is missing at {SALT3008}: run scripts/setup.sh")


@pytest.fixture
def env(request):
    e = Env()
    yield e
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        print(e.dump_logs())
    e.close()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
