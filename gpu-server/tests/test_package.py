import art_server


def test_package_imports_with_a_version() -> None:
    assert art_server.__version__.count(".") == 2
