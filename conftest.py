"""Root pytest configuration: doctests run on kstore/ only, not on test helper modules."""

from pathlib import Path


def pytest_ignore_collect(collection_path: Path, config):  # noqa: ARG001
    parts = collection_path.parts
    if (
        collection_path.suffix == ".py"
        and "tests" in parts
        and not collection_path.name.startswith("test_")
        and collection_path.name not in ("conftest.py", "__init__.py")
    ):
        return True
    return None
