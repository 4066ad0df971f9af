import pytest

from tests.sandboxes.processes import note_present_processes


@pytest.fixture(autouse=True)
def _processes_before_the_test() -> None:
    note_present_processes()
