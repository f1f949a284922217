"""pytest set-up shared by the tests."""


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs CUDA devices; skipped on a machine without them")
