"""pytest fixtures of the browser tests (issue 19, the web console); the stacks and the
browser they drive are in console_stack.py."""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from console_stack import CHROMEDRIVER, CHROMIUM, Stack, make_driver  # noqa: E402


def pytest_configure(config):
    for p in (CHROMIUM, CHROMEDRIVER):
        if not Path(p).exists():
            raise pytest.UsageError(f"{p} is missing: run scripts/setup.sh (Debian chromium, chromium-driver)")
    try:
        import selenium  # noqa: F401
    except ImportError as e:
        raise pytest.UsageError("selenium is missing from the venv: run scripts/setup.sh") from e


BACKENDS = ["sylvite", "salt"]


@pytest.fixture(scope="module", params=BACKENDS)
def stack(request):
    s = Stack(request.param)
    failed = True
    try:
        s.start()
        failed = False
        yield s
        failed = request.session.testsfailed > 0
    finally:
        s.close(failed=failed)


@pytest.fixture(scope="session")
def shots_dir():
    d = os.environ.get("SYLVITE_SCREENSHOTS")
    p = Path(d) if d else Path(tempfile.mkdtemp(prefix="sylvite-console-shots-"))
    p.mkdir(parents=True, exist_ok=True)
    print(f"console screenshots: {p}")
    return p


@pytest.fixture
def browser_factory():
    made = []

    def make(width, height, mobile=False):
        d = make_driver(width, height, mobile)
        made.append(d)
        return d

    yield make
    for d in made:
        try:
            d.quit()
        except Exception:
            pass
