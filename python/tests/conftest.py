"""pytest setup for the recorder and API tests."""
import os
import shutil
import tempfile

import pytest

from skiplog import pytest_runtest_logreport  # noqa: F401  (a pytest hook)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def work(request):
    """A scratch directory under the checkout's target/ (the chroot sees only the
    checkout), named after the test module, removed afterwards."""
    os.makedirs(os.path.join(REPO, "target"), exist_ok=True)
    prefix = request.module.__name__.removeprefix("test_").replace("_", "-") + "-"
    d = tempfile.mkdtemp(prefix=prefix, dir=os.path.join(REPO, "target"))
    yield d
    shutil.rmtree(d, ignore_errors=True)
