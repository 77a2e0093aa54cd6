"""The `rule` marker for the TS-L2 rule tests (registered here too, so this folder runs on its own)."""


def pytest_configure(config):
    config.addinivalue_line("markers", 'rule(id, kind): the catalogue rule a test is about; kind "keeps" or "fires"')
