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


def _hypothesis_profiles() -> None:
    """With ``CI`` set, property tests run a fixed (derandomized) set of examples, so a CI
    run is reproducible; elsewhere every run explores new examples (and a failure prints the
    blob that replays it). ``HYPOTHESIS_PROFILE=explore`` forces exploration in CI too."""
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, print_blob=True)
    settings.register_profile("explore", print_blob=True)
    default = "ci" if os.environ.get("CI") else "explore"
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))


_hypothesis_profiles()
