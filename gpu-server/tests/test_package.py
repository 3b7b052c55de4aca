import pytest

import art_server

pytestmark = pytest.mark.fast  # no server process (docs/development.md#tiers)


def test_package_imports_with_a_version() -> None:
    assert art_server.__version__.count(".") == 2
