"""pytest setup for the recorder and API tests."""
from skiplog import pytest_runtest_logreport  # noqa: F401  (a pytest hook)
