import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sylvite_harness import BIN, Env  # noqa: E402


def pytest_configure(config):
    for exe in ("salt-master", "salt-minion", "salt", "salt-key", "salt-run", "salt-call"):
        if not (BIN / exe).exists():
            raise pytest.UsageError(f"{BIN / exe} is missing: build first (scripts/build.sh)")


@pytest.fixture
def env(request):
    e = Env()
    yield e
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(e.dump_logs())
    e.close()


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
