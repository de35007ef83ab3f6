"""Root conftest: the harness's own tests use pytester to drive the plugin."""

pytest_plugins = ["pytester"]
