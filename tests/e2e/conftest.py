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


# Tests whose timing depends on the machine not being saturated: the GlusterFS labs (their
# clients drop a brick that does not answer within network.ping-timeout, 5 s, and a client
# that loses two bricks loses quorum) and the ones that drive 1,000 swarm minions. With
# `-n 2 --dist loadgroup` (scripts/test.sh) they share one xdist worker, one after the
# other, while the other worker runs the rest.
HEAVY = {"test_gluster.py", "test_cluster_multihost.py", "test_cluster_join_multihost.py",
         "test_cluster_join_load.py", "test_bench_smoke.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in HEAVY:
            item.add_marker(pytest.mark.xdist_group("heavy"))
